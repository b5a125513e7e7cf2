"""Compile before serving: one forward of each batch-shape class a scheduler step can produce.

Triton compiles a kernel once per *specialisation*: its constexpr values and, for integer
arguments, whether each is 1 or a multiple of 16. The launchers here derive constexprs from
the batch's shape (``block_n(N)`` of the varlen ops is the power of two ≥ N; the MoE launch
bucket, the linear ``block_m`` and the align ``CHUNK`` follow powers of two of T; attention
prefill switches tiles at ``LONG_T``), so the first step with a new (N sequences, T packed
tokens) class stops every stream for seconds while it compiles (on the H200, 4-11 s steps in a
32-client serving run). A prompt's later pieces read history from the cache, so each class also
runs once as a continuation (a 1 s step remained in a mixed-length run without it). Decode batches are covered by the captured CUDA graphs, and an eager
decode over the same N classes is run for batches beyond them.

The classes are swept, not listed: N and T each take 1, every power of two and one past it (a
class boundary at any power of two, or any bucket edge with a power of two on each side, has a
representative on both sides and both residues mod 16), T up to ``prefill_chunk_tokens``, N up
to the free slots and never above T.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .runtime import Engine


@dataclass(frozen=True)
class WarmupReport:
    """What ``warm_up`` ran.

    Attributes:
        prefills: prefill forwards run (one per (N, T) class).
        continued: second pieces of those prompts run (the same class after history in the cache).
        decodes: eager decode forwards run (one per batch size N no captured graph covers).
        seconds: wall time, compiles included (the device synchronised at the end).
    """

    prefills: int
    continued: int
    decodes: int
    seconds: float


def classes(limit: int) -> list[int]:
    """1, every power of two p ≤ limit and p + 1 ≤ limit, and ``limit`` itself; ascending."""
    out, p = {1, limit}, 1
    while p <= limit:
        out.update(x for x in (p, p + 1) if x <= limit)
        p *= 2
    return sorted(out)


def shapes(max_seqs: int, max_tokens: int) -> list[tuple[int, int]]:
    """The (N sequences, T packed tokens) pairs swept, N ≤ T (every sequence has a token)."""
    return [(n, t) for n in classes(max_seqs) for t in classes(max_tokens) if n <= t]


def split(t: int, n: int) -> list[int]:
    """``t`` tokens as ``n`` pieces that differ by at most one (a step packs pieces of unequal length too)."""
    return [t // n + (i < t % n) for i in range(n)]


def warm_up(engine: Engine, max_seqs: int | None = None, max_tokens: int | None = None, seed: int = 0) -> WarmupReport:
    """Run a prefill of every ``shapes`` pair on free slots (random tokens, never all zeros), then
    the same pieces again as the prompts' continuation where both fit in ``max_seq_len``, the
    first of each N followed by an eager decode when no captured graph covers N; the slots are released after
    each pair, so the engine holds nothing afterwards. Call it with no sequence live.

    Args:
        max_seqs: most sequences in one step (default: the free slots).
        max_tokens: most packed prompt tokens in one step (default: ``prefill_chunk_tokens``,
            capped at ``max_seq_len - 1`` so that the decode after it has room).

    Raises:
        ValueError: a slot is live (warming would run beside it), or a bound below 1.
    """
    cache = engine.cache
    free = cache.free_slots
    if free < cache.cfg.max_batch:
        raise ValueError(f"warm_up: {cache.cfg.max_batch - free} slots are live; warm up before admitting requests")
    n_max = free if max_seqs is None else min(max_seqs, free)
    t_max = min(engine.tunables.prefill_chunk_tokens, cache.cfg.max_seq_len - 1) if max_tokens is None else max_tokens
    if n_max < 1 or t_max < 1:
        raise ValueError(f"warm_up: max_seqs {n_max} and max_tokens {t_max} must be at least 1")
    gen = torch.Generator().manual_seed(seed)
    vocab = engine.dims.vocab_size
    t0, prefills, continued, decoded = time.perf_counter(), 0, 0, set()
    for n, t in shapes(n_max, t_max):
        pieces = [torch.randint(1, vocab, (k,), generator=gen).tolist() for k in split(t, n)]
        slots = cache.allocate(n)
        try:
            engine._run(pieces, slots, decode=False, last_only=True, return_hidden=False)
            prefills += 1
            if 2 * max(map(len, pieces)) < cache.cfg.max_seq_len:
                engine._run(pieces, slots, decode=False, last_only=True, return_hidden=False)
                continued += 1
            if n not in decoded and (engine.graphs is None or not engine.graphs.covers(n)):
                engine._run([[p[-1]] for p in pieces], slots, decode=True, last_only=True, return_hidden=False)
                decoded.add(n)
        finally:
            cache.release(slots)
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)
    return WarmupReport(prefills, continued, len(decoded), time.perf_counter() - t0)

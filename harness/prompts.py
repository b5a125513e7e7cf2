"""Parity prompts: fresh random token ids per gate run, seeded, with lengths that cross every boundary.

DESIGN.md, "Numerical parity": inputs are drawn fresh per gate run (the seed is recorded in
the result) so an engine cannot be tuned to a fixed prompt set. Lengths sit on both sides of
every internal boundary the engine has: 64-token GDN chunks and 64/128-wide attention tiles
(63-65, 127-129), the 1-3 token edge cases (fewer keys than split-K decode splits), and, on a
GPU, the split-K and prefill-chunk boundaries up to 2,048 (``prefill_chunk_tokens``) and beyond.
The batched decode of all prompts (11 on CPU, 23 on a GPU) runs every batch size from 1 to that
N (``harness.parity_engine.decode_schedule``), so every CUDA-graph bucket up to it is compared. One prompt per set is **drawn from the seed** (``SeedDrawn``): its length is uniform in
a range, so an engine that limits full attention to a window just longer than the longest
fixed prompt fails on it. Token ids are uniform over the whole vocabulary, nothing avoided
(special and EOS ids included).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch


class SeedDrawn(int):
    """A prompt length drawn from the prompt seed, uniform in [lo, hi]; its int value is ``hi``
    (so ``max(lengths)`` sizes the engine's context for any draw). ``make_prompts`` resolves it."""

    lo: int

    def __new__(cls, lo: int, hi: int) -> "SeedDrawn":
        if not 1 <= lo <= hi:
            raise ValueError(f"a seed-drawn length needs 1 <= lo <= hi, got [{lo}, {hi}]")
        obj = super().__new__(cls, hi)
        obj.lo = lo
        return obj

    def __repr__(self) -> str:
        return f"SeedDrawn({self.lo}, {int(self)})"

    def draw(self, seed: int) -> int:
        """The length for prompt seed ``seed`` (its own generator: the other prompts do not move)."""
        g = torch.Generator().manual_seed((seed * 0x9E3779B1 + 0x5EED) % 2**63)
        return int(torch.randint(self.lo, int(self) + 1, (1,), generator=g))


#: The fixed CPU prompt lengths: both sides of 64 and 128, the 1-3 token edge cases, and 300.
LENGTHS: tuple[int, ...] = (1, 2, 3, 63, 64, 65, 127, 128, 129, 300)
#: CPU parity lengths: ``LENGTHS``, one drawn from the seed in [640, 960], at least twice a window
#: tuned to the longest fixed prompt plus its decode (317 keys), so most of its rows see past such a window, and one
#: drawn in [4, 62], between the fixed short ones (a cut armed on prompts of 4-16 tokens, the CPU bench's length,
#: met no parity prompt: the red team's ``bench_length_fp8_acts``).
CPU_LENGTHS: tuple[int, ...] = (*LENGTHS, SeedDrawn(640, 960), SeedDrawn(4, 62))

#: GPU prompt lengths: the CPU boundaries plus split-K decode (16 splits), 256/512/1024-token tiles,
#: the 2,048-token prefill chunk on both sides, one drawn in [3000, 4000] (at least 900 rows past a
#: window tuned to the longest fixed prompt plus its decode) and one in [18, 62].
GPU_LENGTHS: tuple[int, ...] = (
    1, 2, 3, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 513, 1023, 1025, 2047, 2048, 2049,
    SeedDrawn(3000, 4000), SeedDrawn(18, 62),
)

#: Teacher-forced decode steps after each prompt (also the reference's greedy continuation length).
DECODE_STEPS = 16
#: On a GPU: longer decode runs, so precision lost in the recurrent state accumulates.
GPU_DECODE_STEPS = 32


def default_lengths(device: str) -> tuple[int, ...]:
    """``GPU_LENGTHS`` on ``cuda[:N]``, ``CPU_LENGTHS`` elsewhere."""
    return GPU_LENGTHS if str(device).startswith("cuda") else CPU_LENGTHS


def default_steps(device: str) -> int:
    """``GPU_DECODE_STEPS`` on ``cuda[:N]``, ``DECODE_STEPS`` elsewhere."""
    return GPU_DECODE_STEPS if str(device).startswith("cuda") else DECODE_STEPS


@dataclass(frozen=True)
class Prompt:
    """One parity prompt.

    Attributes:
        name: ``len<L>`` with L zero-padded to 4 digits, e.g. ``len0064``; unique within a set.
        tokens: token ids, each in [0, vocab_size).
    """

    name: str
    tokens: list[int]


def fresh_seed() -> int:
    """A new random seed in [0, 2^31) from the OS, for a gate run given no ``--seed``."""
    return secrets.randbelow(2**31)


def resolve_lengths(seed: int, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """``lengths`` with every ``SeedDrawn`` replaced by its draw for ``seed`` (plain ints kept). A draw that lands on
    a length already in the set moves up to the next free one in its range (wrapping to its low end), so a drawn
    length never repeats a fixed one (the gate adds the bench's prompt lengths to the set: ``parity_lengths``)."""
    taken = {int(n) for n in lengths if not isinstance(n, SeedDrawn)}
    out = []
    for n in lengths:
        if isinstance(n, SeedDrawn):
            v, span = n.draw(seed), int(n) - n.lo + 1
            for k in range(span):
                cand = n.lo + (v - n.lo + k) % span
                if cand not in taken:
                    v = cand
                    break
            taken.add(v)
            out.append(v)
        else:
            out.append(int(n))
    return tuple(out)


def make_prompts(seed: int, vocab_size: int, lengths: tuple[int, ...] = LENGTHS) -> list[Prompt]:
    """Draw one prompt per length, uniform token ids in [0, vocab_size), from a CPU generator seeded with ``seed``.

    A ``SeedDrawn`` length is resolved from ``seed`` first. The same (seed, vocab_size, lengths)
    always gives the same prompts, on any machine.

    Raises:
        ValueError: ``vocab_size`` < 1, a length < 1, or a repeated length (after drawing).
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if any(n < 1 for n in lengths):
        raise ValueError(f"prompt lengths must be ≥ 1, got {lengths}")
    resolved = resolve_lengths(seed, lengths)
    if len(set(resolved)) != len(resolved):
        raise ValueError(f"prompt lengths must be distinct, got {resolved} (from {lengths})")
    g = torch.Generator().manual_seed(seed)
    return [Prompt(f"len{n:04d}", torch.randint(0, vocab_size, (n,), generator=g).tolist()) for n in resolved]

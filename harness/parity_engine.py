"""The engine as the parity stage drives it: its public API called in its worker, and the teacher-forced and
greedy runs of a set of prompts (docs/PARITY.md)."""

from __future__ import annotations

from typing import Protocol

import torch

from harness.worker import Worker


class Forced(Protocol):
    """A sequence to teacher-force: ``harness.reference.ReferenceRun`` or ``harness.parity_wide.ForcedRun``."""

    prompt: list[int]
    continuation: list[int]
    rows: tuple[int, ...] | None


class EngineApi:
    """The engine's public API, called in its worker (plain data in, CPU tensors out)."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker

    def prefill(self, prompts: list[list[int]], return_hidden: bool = False,
                rows: list[list[int] | None] | None = None, slots: list[int] | None = None) -> dict:
        return self.w.call("engine.prefill", prompts=prompts, return_hidden=return_hidden, rows=rows, slots=slots)

    def decode(self, slots: list[int], tokens: list[int]) -> torch.Tensor:
        return self.w.call("engine.decode", slots=slots, tokens=tokens)

    def release(self, slots: list[int]) -> None:
        self.w.call("engine.release", slots=slots)

    def generate(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        return self.w.call("engine.generate", prompts=prompts, max_tokens=n)

    def script(self, prompts: list[list[int]], requests: list[dict], max_steps: int) -> dict:
        return self.w.call("engine.script", prompts=prompts, requests=requests, max_steps=max_steps)


def decode_schedule(batch: int, steps: int) -> list[list[tuple[int, int]]]:
    """The order of the teacher-forced decode steps of ``batch`` sequences prefilled together: per ``decode`` call,
    the ``(sequence, step)`` pairs it feeds (sequences in index order).

    Sequence i starts ``o_i = min(i, steps - 1)`` calls late and then runs its ``steps`` steps back to back, so the
    batch grows 1, 2, ... as sequences join and shrinks ..., 2, 1 as they finish one after another: every batch size
    from 1 to ``batch`` is decoded (twice when ``steps >= batch``) whenever ``batch <= 2 * steps - 1`` (sizes ``steps``
    .. ``batch - steps`` are missing beyond that). Each sequence still gets every one of its ``steps`` rows, so the
    checks compare the same rows as for an all-at-once batch; ``steps + min(batch, steps) - 1`` calls in all.

    Why: a decode path taken only at batch sizes parity never ran (fp8 activations at 2-8 sequences:
    ``tests/cheats/fp8_acts_mid_batch_decode.py``) was compared nowhere while the batched run decoded all N at once.
    """
    if batch < 1 or steps < 1:
        return []
    offsets = [min(i, steps - 1) for i in range(batch)]
    return [[(i, t - o) for i, o in enumerate(offsets) if o <= t < o + steps] for t in range(offsets[-1] + steps)]


def teacher_forced_logits(engine: EngineApi, seqs: list[Forced]) -> list[torch.Tensor]:
    """Prefill the prompts together, then decode the continuation's tokens in the order of :func:`decode_schedule`
    (the batch growing and shrinking through every size up to ``len(seqs)``): float32 [S_i + n, V] per sequence
    (the prompt rows kept, ``rows``, all when None, then the n decode rows)."""
    res = engine.prefill([s.prompt for s in seqs], rows=[list(s.rows) if s.rows is not None else None for s in seqs])
    rows = [[lg.float()] for lg in res["logits"]]
    if len(rows) != len(seqs):
        raise ValueError(f"prefill of {len(seqs)} prompts returned {len(rows)} logit tensors")
    slots = list(res["slots"])
    try:
        for call in decode_schedule(len(seqs), len(seqs[0].continuation)):
            out = engine.decode([slots[i] for i, _ in call], [seqs[i].continuation[j] for i, j in call])  # [B, V]
            if out.shape[0] != len(call):
                raise ValueError(f"decode of {len(call)} sequences returned {out.shape[0]} logit rows")
            for k, (i, _) in enumerate(call):
                rows[i].append(out[k : k + 1].float())
    finally:
        engine.release(slots)
    return [torch.cat(r) for r in rows]


def greedy_tokens(engine: EngineApi, seqs: list[Forced]) -> list[list[int]]:
    """The engine's own greedy continuation of the prompts together, as many tokens as the continuations hold."""
    out = engine.generate([s.prompt for s in seqs], len(seqs[0].continuation))
    if len(out) != len(seqs):
        raise ValueError(f"generate for {len(seqs)} prompts returned {len(out)} outputs")
    return out

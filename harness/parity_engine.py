"""The engine as the parity stage drives it: its public API called in its worker, and the teacher-forced and
greedy runs of a set of prompts (docs/PARITY.md)."""

from __future__ import annotations

import torch

from harness.reference import ReferenceRun
from harness.worker import Worker


class EngineApi:
    """The engine's public API, called in its worker (plain data in, CPU tensors out)."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker

    def prefill(self, prompts: list[list[int]], return_hidden: bool = False,
                rows: list[list[int] | None] | None = None) -> dict:
        return self.w.call("engine.prefill", prompts=prompts, return_hidden=return_hidden, rows=rows)

    def decode(self, slots: list[int], tokens: list[int]) -> torch.Tensor:
        return self.w.call("engine.decode", slots=slots, tokens=tokens)

    def release(self, slots: list[int]) -> None:
        self.w.call("engine.release", slots=slots)

    def generate(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        return self.w.call("engine.generate", prompts=prompts, max_tokens=n)


def teacher_forced_logits(engine: EngineApi, seqs: list[ReferenceRun]) -> list[torch.Tensor]:
    """Prefill the prompts together, then decode the reference's tokens: float32 [S_i + n, V] per sequence
    (the prompt rows the reference kept, ``ReferenceRun.split``, then the n decode rows)."""
    res = engine.prefill([s.prompt for s in seqs], rows=[list(s.rows) if s.rows is not None else None for s in seqs])
    rows = [[lg.float()] for lg in res["logits"]]
    if len(rows) != len(seqs):
        raise ValueError(f"prefill of {len(seqs)} prompts returned {len(rows)} logit tensors")
    try:
        for j in range(len(seqs[0].continuation)):
            out = engine.decode(res["slots"], [s.continuation[j] for s in seqs])  # [B, V]
            for i in range(len(seqs)):
                rows[i].append(out[i : i + 1].float())
    finally:
        engine.release(res["slots"])
    return [torch.cat(r) for r in rows]


def greedy_tokens(engine: EngineApi, seqs: list[ReferenceRun]) -> list[list[int]]:
    """The engine's own greedy continuation of the prompts together, as many tokens as the reference's."""
    out = engine.generate([s.prompt for s in seqs], len(seqs[0].continuation))
    if len(out) != len(seqs):
        raise ValueError(f"generate for {len(seqs)} prompts returned {len(out)} outputs")
    return out

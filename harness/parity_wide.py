"""The wide batch of parity: a decode batch that fills every slot the engine was loaded for (docs/PARITY.md, "Wide
batch").

The batched runs decode at most N = ``len(refs)`` sequences at once (12 on the CPU set, 24 on the GPU set), while the
gate loads every engine for its largest stage (``harness.gate_stages.gate_capacity``: 64 slots by default), so a
decode path taken only above N (a CUDA-graph bucket of 33-64, a cut armed at batch > N) would be compared nowhere.
The wide batch holds the shortest third of the parity prompts once each (judged against the reference like a batched
entry) and fills the other slots with **fresh** prompts drawn here, in the judge, from a seed the engine never sees,
with a judge-drawn continuation to teacher-force. A fresh sequence has no reference run: it is judged by
consistency alone (its teacher-forced rows in the wide batch against the engine's own prefill of the same tokens,
alone) and by its greedy token against its own rows.

Why fresh prompts and not copies: copies of a few prompts err together (a router tie flipped in one prompt's state
sits high on every copy), so a figure pooled over 64 copies of 4 prompts has the spread of 4 prompts; honest engines
failed at 0.0144-0.0156 against 0.0125 about one gate in 14, and counting each prompt once let e4m3 K/V through.
Distinct prompts make the rows independent, so the threshold holds as it does for the batched runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.parity_engine import EngineApi
from harness.reference import ReferenceRun

#: Prompt rows kept per fresh prompt (its last ones): a row is V floats (1 MB at full size), and what the wide batch
#: tests is the batch size, not the prompt.
FRESH_PROMPT_ROWS = 4
#: Fresh prompt lengths are uniform in [1, max(FRESH_MIN_HI, the longest prompt of the pool)], capped at the longest
#: parity prompt (so the engine's context, sized for the parity set, holds them).
FRESH_MIN_HI = 16


@dataclass(frozen=True)
class ForcedRun:
    """A sequence teacher-forced through the engine with no reference run: a fresh prompt of the wide batch.

    Attributes:
        prompt: token ids (length P ≥ 1), uniform over the vocabulary.
        continuation: the tokens fed in decode (length n, the parity set's steps), uniform over the vocabulary.
        rows: the prompt rows kept, ascending, ending at P - 1 (the last ``FRESH_PROMPT_ROWS`` at most).
    """

    prompt: list[int]
    continuation: list[int]
    rows: tuple[int, ...]

    @property
    def split(self) -> int:
        """S: how many of the teacher-forced rows are prompt rows (the rest are the n continuation rows)."""
        return len(self.rows)


@dataclass(frozen=True)
class WideBatch:
    """The wide batch: ``pool`` (indices into the parity set's ``refs``, each once) then ``fresh``, in slot order."""

    pool: list[int]
    fresh: list[ForcedRun]

    def seqs(self, refs: list[ReferenceRun]) -> list[ReferenceRun | ForcedRun]:
        return [refs[i] for i in self.pool] + list(self.fresh)

    def __len__(self) -> int:
        return len(self.pool) + len(self.fresh)


def wide_batch(refs: list[ReferenceRun], batch: int, seed: int) -> WideBatch:
    """The wide batch for ``batch`` slots: empty when ``batch`` is not above ``len(refs)`` (the batched run reaches it
    already); else the shortest third of ``refs`` (at least one prompt, at most ``batch``) and ``batch`` minus that
    many fresh sequences drawn from ``seed`` (a CPU generator: the same seed gives the same batch on any machine).
    Vocabulary and steps are the reference's (``refs[0]``: its logits' last dimension, its continuation's length)."""
    if batch <= len(refs):
        return WideBatch([], [])
    order = sorted(range(len(refs)), key=lambda i: len(refs[i].prompt))
    pool = order[: min(batch, max(1, len(order) // 3))]
    vocab, steps = int(refs[0].logits.shape[-1]), len(refs[0].continuation)
    longest = max(len(r.prompt) for r in refs)
    hi = min(longest, max(FRESH_MIN_HI, max(len(refs[i].prompt) for i in pool)))
    g = torch.Generator().manual_seed(seed)
    fresh = []
    for _ in range(batch - len(pool)):
        p = int(torch.randint(1, hi + 1, (1,), generator=g))
        prompt = torch.randint(0, vocab, (p,), generator=g).tolist()
        cont = torch.randint(0, vocab, (steps,), generator=g).tolist()
        fresh.append(ForcedRun(prompt, cont, tuple(range(max(0, p - FRESH_PROMPT_ROWS), p))))
    return WideBatch(pool, fresh)


def own_prefill_logits(engine: EngineApi, runs: list[ForcedRun]) -> list[torch.Tensor]:
    """Each run's prompt + continuation prefilled alone in one call (the path the alone entries hold to the
    reference), float32 [S + n, V]: the kept prompt rows, then the n rows that predicted after each continuation
    token, the rows its teacher-forced run gives. Raises ``ValueError`` on a result of the wrong count or shape."""
    out = []
    for r in runs:
        tokens = r.prompt + r.continuation
        rows = list(r.rows) + list(range(len(r.prompt), len(tokens)))
        res = engine.prefill([tokens], rows=[rows])
        engine.release(res["slots"])
        if len(res["logits"]) != 1 or res["logits"][0].shape[0] != len(rows):
            got = [tuple(x.shape) for x in res["logits"]]
            raise ValueError(f"prefill of one {len(tokens)}-token prompt for {len(rows)} rows returned logits {got}")
        out.append(res["logits"][0].float())
    return out

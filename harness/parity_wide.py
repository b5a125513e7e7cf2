"""The wide batch of parity: a decode batch that fills every slot the engine was loaded for (docs/PARITY.md, "Wide
batch").

The batched runs decode at most N = ``len(refs)`` sequences at once (12 on the CPU set, 24 on the GPU set), while the
gate loads every engine for its largest stage (``harness.gate_stages.gate_capacity``: 64 slots by default), so a
decode path taken only above N (a CUDA-graph bucket of 33-64, a cut armed at batch > N) would be compared nowhere.
The wide batch holds the shortest third of the parity prompts once each (judged against the reference like a batched
entry) and fills the other slots with **windows**: a parity prompt's tokens (prompt + reference continuation) cut at
a judge-drawn point k, the first k tokens prefilled and the next n teacher-forced. A window's rows are rows of that
prompt's hidden-state prefill, which the layer-local checks hold to the reference, so every wide sequence is compared
with a path the reference anchors (consistency), and its greedy token with its own rows.

Why windows and not copies: copies of a few prompts err together (a router tie flipped in one prompt's state sits
high on every copy), so a figure pooled over 64 copies of 4 prompts had the spread of 4 prompts, and honest engines
failed ``decode wide`` at 0.0144-0.0156 against 0.0125 about one gate in 14. Windows spread the batch over every
prompt whose rows are all kept and over different positions of each. Why not fresh prompts without a reference:
their only partner would be another call of the same engine, which an engine that tracks the sequences it has seen
can cut alike (docs/PARITY.md, "Wide").
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from harness.reference import ReferenceRun

#: Prompt rows kept per window (its last ones): a row is V floats (1 MB at full size), and what the wide batch tests
#: is the batch size, not the prompt.
WINDOW_PROMPT_ROWS = 4
#: A window's prompt is at most this long: the cut point k is uniform in [1, min(P, 16)], so decode-written state is
#: most of a window's context (a cut of what decode writes, e4m3 K/V say, errs in proportion to it: 0.0116-0.0124 at
#: k <= 64 against 0.0128-0.0141 at k <= 16 on the CPU, docs/PARITY.md) and the wide prefill stays small.
WINDOW_MAX_PROMPT = 16


@dataclass(frozen=True)
class Window:
    """A wide-batch sequence cut from parity prompt ``source``: its tokens ``t`` = prompt + reference continuation,
    the first ``k`` prefilled, the next n teacher-forced.

    Attributes:
        source: the parity prompt's index into ``refs``.
        prompt: ``t[:k]`` (k ≥ 1); continuation: ``t[k : k + n]``.
        rows: the prompt rows kept, ascending, ending at k - 1 (the last ``WINDOW_PROMPT_ROWS`` at most).
    """

    source: int
    prompt: list[int]
    continuation: list[int]
    rows: tuple[int, ...]

    @property
    def split(self) -> int:
        """S: how many of the teacher-forced rows are prompt rows (the rest are the n continuation rows)."""
        return len(self.rows)

    def positions(self) -> list[int]:
        """The token positions of its teacher-forced rows [S + n]: the kept prompt rows, then k .. k + n - 1 (the row
        at position p predicts token p + 1), which index the source's hidden-state prefill logits."""
        k = len(self.prompt)
        return list(self.rows) + list(range(k, k + len(self.continuation)))


@dataclass(frozen=True)
class WideBatch:
    """The wide batch: ``pool`` (indices into the parity set's ``refs``, each once) then ``windows``, in slot order."""

    pool: list[int]
    windows: list[Window]

    def seqs(self, refs: list[ReferenceRun]) -> list[ReferenceRun | Window]:
        return [refs[i] for i in self.pool] + list(self.windows)

    def __len__(self) -> int:
        return len(self.pool) + len(self.windows)


def wide_batch(refs: list[ReferenceRun], batch: int, seed: int) -> WideBatch:
    """The wide batch for ``batch`` slots: empty when ``batch`` is not above ``len(refs)`` (the batched run reaches it
    already); else the shortest third of ``refs`` (at least one prompt, at most ``batch``) and ``batch`` minus that
    many windows drawn from ``seed``: uniform without replacement over every (source, cut point k) with the source a
    prompt whose rows are all kept (``rows`` None) and k in [1, min(P, 16)], so a 1-token prompt gives at most one
    window and long ones most of them (again only once every pair is taken). The same (refs, batch, seed) gives the
    same batch on any machine."""
    if batch <= len(refs):
        return WideBatch([], [])
    order = sorted(range(len(refs)), key=lambda i: len(refs[i].prompt))
    pool = order[: min(batch, max(1, len(order) // 3))]
    cuts = [(i, k) for i, r in enumerate(refs) if r.rows is None for k in range(1, min(len(r.prompt), WINDOW_MAX_PROMPT) + 1)]
    rng = random.Random(f"parity-wide:{seed}")
    picked: list[tuple[int, int]] = []
    while cuts and len(pool) + len(picked) < batch:  # without replacement; again only when every cut is taken
        picked += rng.sample(cuts, min(len(cuts), batch - len(pool) - len(picked)))
    windows = []
    for i, k in picked:
        r = refs[i]
        t = r.prompt + r.continuation
        windows.append(Window(i, t[:k], t[k : k + len(r.continuation)], tuple(range(max(0, k - WINDOW_PROMPT_ROWS), k))))
    return WideBatch(pool, windows)

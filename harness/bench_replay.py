"""The replay check: the candidate's own timed outputs, teacher-forced by the candidate itself.

``harness.bench_outputs`` holds the candidate's bench outputs to the baseline's rows with a margin wide enough for
two engines' honest differences (0.5 std of the row), so a precision cut that the engine arms only inside the bench's
``generate`` calls (its batch size, its lengths) and that moves the rows by less passes it. Parity's greedy rule
against the engine's own rows (``parity_metrics.greedy_self_agreement``) sees such a cut only in the ``generate``
calls parity makes, never at the bench's shapes.

Here every timed call of the candidate (warm-up included) is teacher-forced after the rounds, in a fresh worker of
the candidate, with the same prompts in one batch (``engine.replay``:
prefill together, decode the call's own tokens): each token the call returned must be a top-1 of the replayed row,

    max(row) - row[token] <= 2^-8 * max|row| + 2 * z * noise * rms(row)

where ``noise`` is the engine's own path noise measured by parity (its largest decode consistency figure: teacher-
forced decode rows against its own prefill of the same tokens, relative L2, so ``noise * rms(row)`` is the typical
per-id difference between two of its paths) and z = ``REPLAY_Z``. An honest engine computes the same rows in the
replay as in ``generate`` up to that noise; a cut armed in ``generate`` shows at every token it flipped.

A call of N tokens may hold ``N // REPLAY_FLIP_TOKENS`` tokens over the bound, each the runner-up of its replayed row
(a finite gap, one id above it): a router near-tie that ``generate`` resolved otherwise than the replay swaps an expert
for one token, a discrete jump of its row that no noise bound covers (the honest tiny engine on an H100: 1 of 8,192 tokens of a conc32 call at 2.23x the bound). A precision cut
moves every row and flips every near-tie within its move, far more than one token in 4,096. Calls on the CPU's bench
shapes are shorter than that, so there every token is held to the bound.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from harness.tolerances import BF16_U
from harness.workloads import BenchError

#: ids per row may each move by this many of the engine's per-id path noise
REPLAY_Z = 3.0
#: one token of every this many in a call may lie over the bound if it is its row's runner-up (a router near-tie)
REPLAY_FLIP_TOKENS = 4096


@dataclass
class ReplayCheck:
    """Figures of the replay check (the bench JSON's ``replay_check``).

    Attributes:
        calls / tokens: timed calls replayed / output tokens checked. over: tokens over the bound (each call at most
            its ``tokens // flip_tokens``, all runners-up, else the check raised). allowed: the sum of those allowances.
        flip_tokens: the allowance's rate the check ran with.
        worst: the largest gap / bound seen (over 1 when a token was allowed). noise: the path noise the bound used
            (None: not run).
        skipped: why the check did not run, else None.
    """

    calls: int = 0
    tokens: int = 0
    over: int = 0
    allowed: int = 0
    flip_tokens: int = REPLAY_FLIP_TOKENS
    worst: float = 0.0
    noise: float | None = None
    skipped: str | None = None

    def to_dict(self) -> dict:
        """JSON form."""
        return asdict(self) | {"z": REPLAY_Z, "floor_rel": BF16_U}


def check_replay(runner, calls: list[tuple[list[list[int]], list[list[int]]]], noise: float | None,
                 flip_tokens: int = REPLAY_FLIP_TOKENS) -> ReplayCheck:
    """Replay ``calls`` (timed calls' prompts and outputs) in ``runner``'s worker: a fresh
    worker of the candidate that never ran ``generate`` (``harness.bench.run_bench``), so an engine that changes what
    it computes once the bench's calls have begun (the red team's ``sticky_bench_fp8_acts``: a cut armed for good when
    the first call after load is ``generate``) replays with the rows it computes under parity.

    ``flip_tokens``: a call may hold one token over the bound per this many of its tokens, if that token is the
    runner-up of its replayed row (every id but one below it) with a finite gap.

    Raises:
        BenchError: more of a call's replayed tokens lie over the bound than it may hold (the engine computes otherwise
            in the bench's ``generate`` than when the same batch is teacher-forced), or the worker's reply has the
            wrong shape.
    """
    if noise is None:
        return ReplayCheck(skipped="no parity figure for the engine's path noise (run the parity stage before bench)")
    check = ReplayCheck(noise=noise, flip_tokens=flip_tokens)
    for prompts, outs in calls:
        m = runner.worker.call("engine.replay", prompts=[list(p) for p in prompts], outputs=[list(o) for o in outs])
        gap, top, rms, rank = (m[k].double() for k in ("gap", "top", "rms", "rank"))
        if gap.shape != (len(outs), len(outs[0])) or any(x.shape != gap.shape for x in (top, rms, rank)):
            raise BenchError(f"{runner.name}: replay of {len(outs)} x {len(outs[0])} tokens came back as {tuple(gap.shape)}")
        bound = BF16_U * top + 2 * REPLAY_Z * noise * rms
        ratio = torch.where(bound > 0, gap / bound, torch.where(gap == 0, 0.0, torch.inf))
        bad = ~(ratio <= 1.0)  # NaN counts as over
        # only a finite runner-up may use the allowance: a NaN, a non-finite row or a token deeper in its row never does
        hard = bad & ~(torch.isfinite(ratio) & (rank == 1))
        allowed = 0 if hard.any() else gap.numel() // flip_tokens
        check.calls += 1
        check.tokens += gap.numel()
        check.over += int(bad.sum())
        check.allowed += allowed
        check.worst = max(check.worst, float(ratio.nan_to_num(nan=torch.inf).max()) if ratio.numel() else 0.0)
        if int(bad.sum()) > allowed:
            s, j = (int(x) for x in bad.nonzero()[0])
            raise BenchError(
                f"{runner.name}: {int(bad.sum())} of {gap.numel()} tokens of a timed generate call ({len(outs)} prompts x "
                f"{len(outs[0])} tokens) are not top-1s of the engine's own rows when the same batch is teacher-forced "
                f"(first: sequence {s}, token {j}, {float(ratio[s, j]):.3g}x the bound at path noise {noise:.3g}; the "
                f"call may hold {gap.numel() // flip_tokens} runners-up, one per {flip_tokens} tokens, and {int(hard.sum())} "
                "are not): the engine computes otherwise when benchmarked "
                "than under prefill()/decode()")
    return check

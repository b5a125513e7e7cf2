"""The A/B output check: every token the candidate produced while timed must be one the baseline could have produced.

Both engines passed parity, so on the same prompt their greedy outputs agree token for token
until a near-tie, where bf16 rounding may send them down different but equally legitimate paths.
The check, on every prompt both were timed on:

1. first tokens: at least ``MIN_AGREEMENT`` of them agree (``MIN_COMPARED`` or more compared): identical, or a
   near-tie, the candidate's first token within the margin of step 2 at position 0 (an honest change of rounding,
   e.g. an fp32 engine against a bf16 baseline, flips near-ties on a random-weight model: red team R3's
   ``fp32_cpu_engine`` lost 2-3 of 12-19 first tokens and was refused); a candidate output without a baseline
   twin (a prompt only the candidate was timed on: decode-bs1 redraws its prompts when t_N <= t_1, which an
   engine can provoke) is judged by the baseline's teacher-forced top-1 instead, never skipped;
2. every output that differs from the baseline's in any token (or has no twin) is teacher-forced through the
   baseline's worker (``engine.margins``: prompt + the candidate's own tokens): at each position
   the candidate's token must lie within ``MARGIN_STD`` standard deviations (of the baseline's
   logit row there) below the baseline's top-1 logit, i.e. be a bf16-plausible greedy choice
   given the candidate's own history. More than ``MAX_IMPLAUSIBLE`` of all compared tokens
   outside that margin is a red bench: the candidate computes something else when benchmarked
   (e.g. repeats its first token) than under parity.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from harness.workloads import BenchError

#: Fewest first tokens compared, and the least share that must agree (honest engines differ only on rare near-ties).
MIN_COMPARED, MIN_AGREEMENT = 4, 0.9
#: A candidate token is plausible when baseline top-1 logit − its logit <= MARGIN_STD · std(baseline row).
MARGIN_STD = 0.5
#: Largest share of compared tokens allowed outside the margin.
MAX_IMPLAUSIBLE = 0.02


@dataclass
class OutputCheck:
    """Figures of the check (the bench JSON's ``output_check``).

    Attributes:
        sequences / identical: outputs compared / of those, identical to the baseline's.
        tokens: output tokens compared; teacher_forced: tokens of differing outputs checked by margin.
        implausible: of those, tokens outside the margin; worst_gap_std: largest gap / std seen.
        first_compared / first_agree: first tokens compared / identical (to the baseline's own output, or for an
            unpaired output to the baseline's teacher-forced top-1).
        unpaired: candidate outputs of prompts the baseline was not timed on, checked by teacher forcing alone.
    """

    sequences: int = 0
    identical: int = 0
    tokens: int = 0
    teacher_forced: int = 0
    implausible: int = 0
    worst_gap_std: float = 0.0
    first_compared: int = 0
    first_agree: int = 0
    unpaired: int = 0

    def to_dict(self) -> dict:
        """JSON form."""
        return asdict(self) | {"margin_std": MARGIN_STD, "max_implausible": MAX_IMPLAUSIBLE, "min_agreement": MIN_AGREEMENT}


def check_outputs(candidate, baseline) -> OutputCheck:
    """Compare the timed outputs of two ``WorkerRunner`` s (``.outputs``, ``.name``, ``.worker``).

    Raises:
        BenchError: first tokens disagree too often, or too many candidate tokens are implausible for the baseline.
    """
    check = OutputCheck()
    for key in sorted(candidate.outputs):  # every timed output of the candidate, with or without a baseline twin
        prompt, _ = key
        c, b = candidate.outputs[key], baseline.outputs.get(key)
        check.sequences += 1
        check.tokens += len(c)
        check.first_compared += 1
        if b is not None:
            check.first_agree += int(c[:1] == b[:1])
            if c == b:
                check.identical += 1
                continue
        if not c:
            continue
        m = baseline.worker.call("engine.margins", prompt=list(prompt), tokens=list(c))
        gaps, stds = m["gap"].double(), m["std"].double()
        if gaps.shape[0] != len(c) or stds.shape[0] != len(c):
            raise BenchError(f"{baseline.name}: teacher-forced margins of {len(c)} tokens came back with {gaps.shape[0]} rows")
        if b is None:
            check.unpaired += 1
            check.first_agree += int(int(m["top1"][0]) == c[0])
        elif c[:1] != b[:1]:  # a near-tie at the first token agrees; an implausible one does not
            g0, s0 = float(gaps[0]), float(stds[0])
            check.first_agree += int(s0 > 0 and g0 / s0 <= MARGIN_STD)
        for g, s in zip(gaps.tolist(), stds.tolist()):
            ratio = g / s if s > 0 else math.inf
            check.teacher_forced += 1
            if not ratio <= MARGIN_STD:  # NaN counts as implausible
                check.implausible += 1
            if math.isfinite(ratio):
                check.worst_gap_std = max(check.worst_gap_std, ratio)
    if check.first_compared >= MIN_COMPARED and check.first_agree < MIN_AGREEMENT * check.first_compared:
        raise BenchError(
            f"{candidate.name} and {baseline.name} disagree on the first greedy token of "
            f"{check.first_compared - check.first_agree} of {check.first_compared} bench prompts: the engine computes "
            "something else when benchmarked than under parity")
    if check.tokens and check.implausible > MAX_IMPLAUSIBLE * check.tokens:
        raise BenchError(
            f"{check.implausible} of {check.tokens} bench output tokens of the {candidate.name} are not plausible greedy "
            f"choices of the {baseline.name} given the same history (more than {MARGIN_STD} std below its top-1 logit): "
            "the full bench outputs disagree, the engine computes something else when benchmarked than under parity")
    return check

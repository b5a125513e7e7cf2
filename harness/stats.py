"""A/B statistics: medians, spreads, the speedup objective and its noise bar.

Definitions (docs/BENCHMARKS.md, "A/B method" and "Noise rule"):

- spread of one sample list = (max − min) / median (relative range; conservative with the
  few rounds a gate can afford).
- per workload, ratio ``r_i`` = candidate over baseline in round ``i`` (baseline over
  candidate for lower-is-better figures such as TTFT), so each ratio pairs two samples taken
  back to back and cancels drift common to both; ``ratio`` = median of the ``r_i``;
  ``noise`` = (max r_i − min r_i) / (2 · ratio), half the relative range of the paired ratios.
- ``speedup`` = geometric mean of the per-workload ratios; ``noise`` of the objective = root
  mean square of the per-workload noises;
- ``beats_baseline`` = speedup − 1 > noise, and no workload with ratio − 1 < −its noise.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass


def _check(samples: list[float], what: str) -> None:
    if not samples:
        raise ValueError(f"{what}: no samples; run at least one round")
    bad = [x for x in samples if not math.isfinite(x) or x <= 0]
    if bad:
        raise ValueError(f"{what}: samples must be finite and positive, got {bad[:3]}")


def spread(samples: list[float]) -> float:
    """Relative range (max − min) / median of positive finite samples (0 for one sample).

    Raises:
        ValueError: empty list, or a sample that is NaN, infinite or not positive.
    """
    _check(samples, "spread")
    return (max(samples) - min(samples)) / statistics.median(samples)


@dataclass(frozen=True)
class WorkloadAB:
    """One workload compared A/B.

    Attributes:
        ratio: median paired ratio, > 1 when the candidate is better (TTFT inverted).
        noise: half relative range of the paired ratios.
        ratios: the per-round paired ratios.
    """

    ratio: float
    noise: float
    ratios: list[float]

    @property
    def regressed(self) -> bool:
        """True when the candidate is worse by more than this workload's noise."""
        return self.ratio - 1.0 < -self.noise


def compare(candidate: list[float], baseline: list[float], higher_is_better: bool) -> WorkloadAB:
    """Pair the two sample lists round by round and summarise (definitions in the module docstring).

    Args:
        candidate, baseline: one figure per round each (tok/s or ms), the same length.
        higher_is_better: True for throughput, False for latency (the ratio is inverted).

    Raises:
        ValueError: unequal lengths, empty lists, NaN/inf/non-positive samples.
    """
    _check(candidate, "candidate samples")
    _check(baseline, "baseline samples")
    if len(candidate) != len(baseline):
        raise ValueError(f"A/B needs one candidate and one baseline sample per round, got {len(candidate)} and {len(baseline)}")
    ratios = [c / b if higher_is_better else b / c for c, b in zip(candidate, baseline)]
    ratio = statistics.median(ratios)
    return WorkloadAB(ratio, (max(ratios) - min(ratios)) / (2.0 * ratio), ratios)


@dataclass(frozen=True)
class Objective:
    """The gate's objective: ``speedup`` (geomean of ratios), ``noise`` (RMS of workload noises), ``beats_baseline``."""

    speedup: float
    noise: float
    beats_baseline: bool
    regressed: list[str]

    def to_dict(self) -> dict:
        """JSON form for the gate's ``bench.objective``."""
        return {"speedup": self.speedup, "noise": self.noise, "beats_baseline": self.beats_baseline, "regressed": self.regressed}


def objective(results: dict[str, WorkloadAB]) -> Objective:
    """Combine per-workload comparisons into the objective.

    Raises:
        ValueError: no workloads.
    """
    if not results:
        raise ValueError("objective of no workloads; select at least one of ttft, decode-bs1, conc32")
    speedup = math.exp(sum(math.log(r.ratio) for r in results.values()) / len(results))
    noise = math.sqrt(sum(r.noise**2 for r in results.values()) / len(results))
    regressed = sorted(name for name, r in results.items() if r.regressed)
    # and the candidate won every paired round of every workload (a sign test: with wild timings,
    # as on a loaded CPU, a median-and-range noise bar from few rounds alone let a no-faster engine through)
    every_round = all(min(r.ratios) > 1.0 for r in results.values())
    return Objective(speedup, noise, speedup - 1.0 > noise and not regressed and every_round, regressed)

"""The run's wall-clock and USD limits: whether one is used up, and the flag that raises it.

One rule for both places that ask: the loop at each iteration boundary, and ``--resume`` before it opens anything
(a resumed run whose limit is already used up would stop again at once)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BudgetStop:
    """A used-up limit.

    Attributes:
        reason: what was used up, e.g. ``time limit of 30 min reached (1803 s over all sessions)``.
        flag: the ``metainfer build`` option that raises it (``--time-limit`` minutes or ``--budget-usd``, totals).
    """

    reason: str
    flag: str

    def advice(self, resume_cmd: str) -> str:
        """``reason`` plus the command that continues the run with a larger total."""
        unit = "<total minutes>" if self.flag == "--time-limit" else "<total USD>"
        return f"{self.reason}; continue with: {resume_cmd} {self.flag} {unit} (larger than the one used up)"


def budget_stop(budget: dict, active_seconds: float, cost_usd: float) -> BudgetStop | None:
    """The first used-up limit of ``budget`` (the run state's ``{"time_limit_min", "budget_usd"}``, None = no limit),
    given the run's active seconds over all its sessions and its agent cost in USD; None while both have room."""
    limit = budget.get("time_limit_min")
    if limit is not None and active_seconds >= limit * 60:
        return BudgetStop(f"time limit of {limit:g} min reached ({active_seconds:.0f} s over all sessions)", "--time-limit")
    usd = budget.get("budget_usd")
    if usd is not None and cost_usd >= usd:
        return BudgetStop(f"budget of ${usd:g} spent (${cost_usd:.2f})", "--budget-usd")
    return None

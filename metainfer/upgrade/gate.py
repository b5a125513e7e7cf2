"""Gate one upgrade step exactly as ``metainfer build`` gates an iteration.

``judge`` is the build's (``metainfer.build.iteration.judge``): the same gate runner, quick-parity
flags from ``run.json`` ``gate`` (which ``metainfer upgrade`` fills), the same decision, including
the margin of the run's noise run (iteration 0, the re-rendered engine raced against itself).
"""

from __future__ import annotations

from metainfer.build.decision import Decision
from metainfer.build.iteration import Verdict, judge

__all__ = ["judge", "rejected"]


def rejected(reason: str) -> Verdict:
    """A verdict for a step that never reached the gate (a conflict, an agent error)."""
    return Verdict(Decision(False, reason))

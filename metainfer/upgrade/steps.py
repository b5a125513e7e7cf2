"""The steps of an upgrade after its baseline, each one gated iteration of the upgrade's run record.

- ``carry``: apply one accepted commit of the old branch (paths moved from ``generated/<old>/`` to
  ``generated/<new>/``) with ``git apply --3way`` and gate it against the new branch head;
- ``agent_step``: one agent proposal, gated the same way; for a repair the carried patch is
  applied first (conflict markers and all) and a ``repair.md`` brief says what failed and which
  facts changed; for a re-tune the offline agent sees only the tunables the facts diff names.
"""

from __future__ import annotations

import json
import subprocess
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness.hashing import harness_digest
from metainfer.agents import BudgetExceeded, ProposalContext
from metainfer.build.iteration import Verdict, read_tunables, write_iteration
from metainfer.build.records import utc_now, write_text
from metainfer.build.session import Session
from metainfer.upgrade.gate import judge, rejected

_HEADERS = ("diff --git ", "--- ", "+++ ", "rename from ", "rename to ", "copy from ", "copy to ")


def moved_patch(patch: str, old_rel: str, new_rel: str) -> str:
    """``patch`` (``git show --binary --full-index``) with ``old_rel/`` paths moved to ``new_rel/`` in header lines only."""
    out = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(_HEADERS):
            line = line.replace(f"{old_rel}/", f"{new_rel}/")
        out.append(line)
    return "".join(out)


def old_patch(s: Session, sha: str, old_rel: str) -> str:
    """The engine part of old commit ``sha``, moved onto the new target's folder."""
    text = s.worktree.repo.git.show("--binary", "--full-index", "--format=", sha, "--", old_rel)
    return moved_patch(text + "\n", old_rel, s.worktree.engine_rel)


def apply_3way(s: Session, patch: Path) -> str | None:
    """``git apply --3way`` in the worktree; None when clean, else git's message and the conflicted files."""
    p = subprocess.run(["git", "apply", "--3way", "--whitespace=nowarn", str(patch)], cwd=s.worktree.path,
                       capture_output=True, text=True)
    if p.returncode == 0:
        return None
    unmerged = s.worktree.repo.git.diff("--name-only", "--diff-filter=U").split()
    return (p.stderr.strip() or p.stdout.strip())[:2000] + (f"\nconflicted: {', '.join(unmerged)}" if unmerged else "")


@dataclass
class StepResult:
    """One finished step: ``verdict`` and its iteration ``report`` (``report.json`` contents)."""

    verdict: Verdict
    report: dict[str, Any]


def carry(s: Session, i: int, sha: str, summary: str, old_rel: str) -> tuple[StepResult, str | None]:
    """Iteration ``i``: replay old commit ``sha``; returns the step and the conflict message (None if it applied)."""
    wt, started = s.worktree, utc_now()
    wt.reset_clean()
    harness_before = harness_digest(wt.path / "harness")
    d = s.record.iter_dir(i)
    patch = d / "carried.patch"
    write_text(patch, old_patch(s, sha, old_rel))
    conflict = apply_3way(s, patch)
    diff = wt.stage_diff()
    title = f"{summary} (carried from {sha[:10]})"
    s.progress.line(i, f"carry {sha[:10]}: {summary}" + (" — CONFLICT" if conflict else ""))
    verdict = rejected(f"conflict: {conflict.splitlines()[0]}") if conflict else judge(s, i, title, diff, harness_before)
    tunables = read_tunables(wt.engine_dir)
    wt.reset_clean()
    report = write_iteration(s, i, summary=title, diff=diff, verdict=verdict, started=started, tunables=tunables,
                             cumulative=_cumulative(s, i, verdict))
    return StepResult(verdict, report), conflict


def agent_step(s: Session, agent: Any, i: int, call_no: int, title: str, *, prepare: Callable[[], None] | None = None,
               brief: str | None = None, history_extra: list[dict] | None = None) -> StepResult:
    """Iteration ``i``: ``prepare()`` the worktree (e.g. re-apply a carried patch), let ``agent`` propose (its
    ``ctx.iteration`` is ``call_no``, the agent's own call count in this upgrade), gate, commit or reset, record.

    Raises:
        BudgetExceeded: after the iteration is recorded (the upgrade stops cleanly).
    """
    wt, started = s.worktree, utc_now()
    wt.reset_clean()
    harness_before = harness_digest(wt.path / "harness")
    if prepare is not None:
        prepare()
    d = s.record.iter_dir(i)
    if brief:
        write_text(d / "repair.md", brief)
    st = s.record.state
    ctx = ProposalContext(target=s.target, worktree=wt.path, engine_dir=wt.engine_dir, iteration=call_no,
                          history=s.record.history() + (history_extra or []),
                          best=s.record.gate_json(st["best"]["iteration"]), record_dir=d, seed=st["seed"])
    proposal, error, stop = None, None, None
    t0 = time.monotonic()
    try:
        proposal = agent.propose(ctx)
    except BudgetExceeded as err:
        stop, error = err, traceback.format_exc()
    except Exception as err:  # an agent's crash is a rejected step, never a lost upgrade
        error = traceback.format_exc()
        s.progress.line(i, f"agent error: {type(err).__name__}: {err}")
    agent_s = time.monotonic() - t0
    st["cost_usd"] = st["cost_usd"] + (proposal.cost_usd if proposal else 0.0)
    diff = wt.stage_diff()
    summary = f"{title}: {proposal.summary}" if proposal else f"{title}: (agent {'stopped' if stop else 'failed'})"
    if stop is not None:
        verdict = rejected(f"stopped: {stop}")
    elif error is not None:
        verdict = rejected(f"agent error: {error.strip().splitlines()[-1]}")
    elif not proposal.changed and prepare is None:
        verdict = rejected("the agent made no change")
    else:
        s.progress.line(i, f"{title} ({agent_s:.1f}s): {proposal.summary}")
        verdict = judge(s, i, summary, diff, harness_before)
    tunables = read_tunables(wt.engine_dir)
    wt.reset_clean()
    report = write_iteration(s, i, summary=summary, diff=diff, verdict=verdict, proposal=proposal, error=error,
                             started=started, agent_seconds=agent_s, tunables=tunables, cumulative=_cumulative(s, i, verdict))
    if stop is not None:
        raise stop
    return StepResult(verdict, report)


def _cumulative(s: Session, i: int, v: Verdict) -> float:
    """The run's cumulative speedup after iteration ``i``'s verdict (``best`` moves to ``i`` on acceptance)."""
    st = s.record.state
    cum = st["best"]["cumulative_speedup"]
    if v.decision.accepted and v.outcome is not None:
        cum = cum * float(v.outcome.result["bench"]["objective"]["speedup"])
        st["best"] = {"iteration": i, "commit": v.commit, "cumulative_speedup": cum}
    return cum


class RetuneAgent:
    """The offline agent limited to ``names``: the tunables whose best value depends on changed shapes.

    It shows the offline agent a ``tunables.json`` whose ``space`` holds only those names, then puts the
    full space back around the value the agent chose, so the committed file keeps every declared tunable.
    """

    name = "offline-retune"

    def __init__(self, names: list[str]):
        from metainfer.agents.offline import OfflineAgent

        self.names = list(names)
        self.inner = OfflineAgent()

    def propose(self, ctx: ProposalContext):
        """One offline proposal over ``names`` (those present in the engine's space)."""
        path = ctx.engine_dir / "engine" / "tunables.json"
        data = json.loads(path.read_text())
        full = data["space"]
        data["space"] = {k: v for k, v in full.items() if k in self.names}
        path.write_text(json.dumps(data, indent=2) + "\n")
        try:
            proposal = self.inner.propose(ctx)
        finally:
            now = json.loads(path.read_text())
            now["space"] = full
            path.write_text(json.dumps(now, indent=2) + "\n")
        return proposal

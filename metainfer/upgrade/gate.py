"""Gate one upgrade step with the build's gate runner, and commit it when the build's rule accepts it.

The same runner (``metainfer.build.gate_runner.run_gate``: subprocess, timeout, pid saved for
resume) and the same decision (``metainfer.build.decision``) as ``metainfer build``; the only
addition is the gate's quick-parity flags (``--parity-lengths``/``--parity-steps``), which an
upgrade may set (the run keeps them in ``run.json`` ``gate``).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from metainfer.build.decision import Decision, commit_message, decide, decide_baseline, trailers
from metainfer.build.gate_runner import GateOutcome, GateRequest, run_gate
from metainfer.build.iteration import Verdict, check_diff, gate_seed
from metainfer.build.records import write_json
from metainfer.build.session import Session
from metainfer.build.worktree import CandidateDiff


@dataclass(frozen=True)
class UpgradeGateRequest(GateRequest):
    """A ``GateRequest`` plus the gate's quick-parity flags (None = the gate's full parity set)."""

    parity_lengths: tuple[int, ...] | None = None
    parity_steps: int | None = None

    def argv(self, json_out: Path) -> list[str]:
        """The build's gate command line, plus ``--parity-lengths`` / ``--parity-steps`` when set."""
        argv = super().argv(json_out)
        if self.parity_lengths:
            argv += ["--parity-lengths", ",".join(str(n) for n in self.parity_lengths)]
        if self.parity_steps is not None:
            argv += ["--parity-steps", str(self.parity_steps)]
        return argv


def gate(s: Session, i: int, baseline_sha: str | None, *, against_self: bool = False) -> tuple[GateOutcome, int]:
    """Gate the worktree's engine A/B against the engine at ``baseline_sha`` (or a copy of itself); see
    ``metainfer.build.iteration.run_gate_for``, which this mirrors with the upgrade's parity flags."""
    d = s.record.iter_dir(i)
    seed = gate_seed(s.config.seed, i)
    g = s.record.state["gate"]

    def on_start(pid: int) -> None:
        s.record.state["in_flight"] = {"iteration": i, "gate_pid": pid}
        s.save()

    with tempfile.TemporaryDirectory(prefix="metainfer-best-") as tmp:
        if against_self:
            best = Path(tmp) / s.worktree.engine_rel
            shutil.copytree(s.worktree.engine_dir, best, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            best = s.worktree.export(baseline_sha, Path(tmp))
        lengths = g.get("parity_lengths")
        req = UpgradeGateRequest(engine=s.worktree.engine_dir, baseline=best, checkpoint=s.checkpoint, gpu=s.target.gpu.name,
                                 seed=seed, rounds=s.config.gate_rounds, scale=s.config.gate_scale,
                                 workloads=s.config.gate_workloads, timeout_s=s.config.gate_timeout_s,
                                 parity_lengths=tuple(lengths) if lengths else None, parity_steps=g.get("parity_steps"))
        s.progress.line(i, f"gate started ({'noise run: engine vs itself' if against_self else 'A/B vs ' + (baseline_sha or '')[:10]})")
        outcome = run_gate(req, cwd=s.root, json_out=d / "gate.json", log_path=d / "gate.log", on_start=on_start,
                           on_stage=lambda st, result: s.progress.gate_stage(i, st, result))
    if not (d / "gate.json").is_file():
        write_json(d / "gate.json", outcome.result)
    if outcome.error:
        s.progress.line(i, f"gate error: {outcome.error}")
    return outcome, seed


def judge(s: Session, i: int, summary: str, diff: CandidateDiff, harness_before: str, *, baseline: bool = False) -> Verdict:
    """Check, gate and decide the staged change (``baseline``: the committed engine raced against itself);
    commit an accepted change with the build's trailers. Mirrors ``metainfer.build.iteration.judge``."""
    parent = s.worktree.head_sha()
    early = None if baseline else check_diff(s, diff, harness_before)
    if early is not None:
        return Verdict(early)
    outcome, seed = gate(s, i, parent, against_self=baseline)
    decision = decide_baseline(outcome) if baseline else decide(outcome)
    v = Verdict(decision, outcome, seed)
    if decision.accepted and diff.paths:
        v.commit = s.worktree.commit(commit_message(summary, trailers(outcome.result, seed, s.record.run_id, i)))
    elif decision.accepted:
        v.commit = parent
    return v


def rejected(reason: str) -> Verdict:
    """A verdict for a step that never reached the gate (a conflict, an agent error)."""
    return Verdict(Decision(False, reason))

"""One iteration's mechanics after the agent: check the diff, gate it, commit or reset, record.

Shared by ``metainfer build`` (iterations 1..N), its baseline (iteration 0) and
``metainfer step`` (one iteration of whatever a person changed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.hashing import harness_digest
from metainfer.build.decision import Decision, aa_margin, commit_message, decide, decide_baseline, figures, trailers
from metainfer.build.gate_runner import GateOutcome, GateRequest, run_gate
from metainfer.build.records import utc_now, write_json, write_text
from metainfer.build.report import iteration_markdown
from metainfer.build.session import Session
from metainfer.build.worktree import CandidateDiff
from metainfer.errors import MetainferError
from metainfer.tempdirs import temporary_directory
from metainfer.twin import auto_periods_for, twin_engine


@dataclass
class Verdict:
    """The outcome of judging one candidate.

    Attributes:
        decision: accepted or not, and why.
        outcome: the gate run, or None when the candidate was rejected before the gate.
        gate_seed: the seed given to the gate (None when it did not run).
        commit: sha of the commit made for an accepted candidate, else None.
    """

    decision: Decision
    outcome: GateOutcome | None = None
    gate_seed: int | None = None
    commit: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def gate_seed(run_seed: int, iteration: int) -> int:
    """Fresh, reproducible gate inputs per iteration: ``run_seed * 1000 + iteration``."""
    return run_seed * 1000 + iteration


def check_diff(s: Session, diff: CandidateDiff, harness_before: str) -> Decision | None:
    """Reject a candidate that is empty, touches anything outside ``generated/<target>/`` or changed ``harness/``."""
    if not diff.paths:
        return Decision(False, "no change in the worktree")
    outside = diff.outside(s.worktree.engine_rel)
    if outside:
        shown = ", ".join(outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
        return Decision(False, f"touches files outside {s.worktree.engine_rel}/: {shown}")
    if harness_digest(s.worktree.path / "harness") != harness_before:
        return Decision(False, "harness/ changed (digest differs); the judge is frozen")
    return None


def run_gate_for(s: Session, i: int, baseline_sha: str | None, *, against_self: bool = False) -> tuple[GateOutcome, int]:
    """Gate the worktree's staged engine against the engine of ``baseline_sha`` (or against itself), both exported
    from git objects side by side: the gate judges exactly what an acceptance commits (no file git ignores, which
    ``git add -A`` leaves out), and both folders are made the same way (an engine cannot tell its role from how its
    folder was written; the workers' copies drop the metadata too, ``harness.worker_copy.copy_engine``).

    Saves the gate pid into ``run.json`` (``in_flight``) so a resumed run can stop an orphan. The quick-parity
    flags come from ``run.json`` ``gate`` (``parity_lengths`` / ``parity_steps``: set by ``metainfer upgrade``).
    """
    d = s.record.iter_dir(i)
    seed = gate_seed(s.config.seed, i)
    g = s.record.state.get("gate") or {}

    def on_start(pid: int) -> None:
        s.record.state["in_flight"] = {"iteration": i, "gate_pid": pid}
        s.save()

    with temporary_directory("best", s.root) as tmp:
        staged = s.worktree.staged_tree()
        cand = s.worktree.export(staged, Path(tmp) / "candidate")
        best = s.worktree.export(staged if against_self else baseline_sha, Path(tmp) / "best")
        periods = twin_periods(s)
        twin = None
        if periods:
            try:
                twin = twin_engine(cand, periods, Path(tmp) / "twin")
            except MetainferError as err:  # edits that do not carry onto the twin: red without running the gate
                return _refused_by_twin(s, i, str(err)), seed
        req = GateRequest(engine=cand, baseline=best, checkpoint=s.checkpoint, gpu=s.target.gpu.name,
                          seed=seed, rounds=s.config.gate_rounds, scale=s.config.gate_scale,
                          workloads=s.config.gate_workloads, timeout_s=s.config.gate_timeout_s,
                          parity_lengths=tuple(g["parity_lengths"]) if g.get("parity_lengths") else None,
                          parity_steps=g.get("parity_steps"), twin_engine=twin, twin_periods=periods)
        s.progress.line(i, f"gate started ({'noise run: engine vs itself' if against_self else 'A/B vs ' + (baseline_sha or '')[:10]})")
        outcome = run_gate(req, cwd=s.root, json_out=d / "gate.json", log_path=d / "gate.log", on_start=on_start,
                           on_stage=lambda st, result: s.progress.gate_stage(i, st, result),
                           on_progress=lambda text: s.progress.line(i, f"  {text}"))
    if not (d / "gate.json").is_file():
        write_json(d / "gate.json", outcome.result)
    if outcome.error:
        s.progress.line(i, f"gate error: {outcome.error}")
    return outcome, seed


def twin_periods(s: Session) -> int:
    """Layer periods of this run's twin stage: the run's ``twin_periods`` (0 = none), or when unset
    ``metainfer.twin.auto_periods_for`` (1 on a GPU for a full-size model, else 0)."""
    periods = s.config.twin_periods
    return auto_periods_for(s.target.gpu, s.checkpoint) if periods is None else periods


def _refused_by_twin(s: Session, i: int, why: str) -> GateOutcome:
    """The red outcome of a candidate whose edits cannot be carried onto its twin, written as the iteration's gate.json."""
    msg = f"twin stage: {why}"
    result = {"schema": 2, "ok": False, "error": msg, "stages": [{"name": "twin", "verdict": "red", "seconds": 0.0, "error": msg}]}
    write_json(s.record.iter_dir(i) / "gate.json", result)
    s.progress.line(i, f"gate error: {msg}")
    return GateOutcome(result, None, False, 0.0, error=msg)


def noise_run_margin(s: Session) -> float | None:
    """``decision.aa_margin`` of this run's noise run (iteration 0's gate JSON), None when it has none."""
    path = s.record.iter_dir(0) / "gate.json"
    try:
        return aa_margin(json.loads(path.read_text())) if path.is_file() else None
    except (OSError, ValueError):
        return None


def judge(s: Session, i: int, summary: str, diff: CandidateDiff, harness_before: str, *, baseline: bool = False) -> Verdict:
    """Check, gate and decide one staged candidate; commit it on acceptance (the worktree is left as it was otherwise)."""
    parent = s.worktree.head_sha()
    early = None if baseline else check_diff(s, diff, harness_before)
    if early is not None:
        return Verdict(early)
    outcome, seed = run_gate_for(s, i, parent, against_self=baseline)
    decision = decide_baseline(outcome) if baseline else decide(outcome, noise_run_margin(s))
    v = Verdict(decision, outcome, seed)
    if decision.accepted and diff.paths:
        msg = commit_message(summary, trailers(outcome.result, seed, s.record.run_id, i))
        v.commit = s.worktree.commit(msg)
    elif decision.accepted:
        v.commit = parent
    return v


def write_iteration(s: Session, i: int, *, summary: str, diff: CandidateDiff, verdict: Verdict, proposal: Any = None,
                    error: str | None = None, started: str, agent_seconds: float = 0.0, tunables: dict | None = None,
                    cumulative: float | None = None) -> dict[str, Any]:
    """Write ``candidate.diff``, ``transcript.json``, ``report.md`` and (last) ``report.json`` for iteration ``i``.

    A ``transcript.json`` the agent wrote itself is kept; the loop's traceback then goes to ``agent_error.txt``
    (and always into ``report.json``'s ``error``).
    """
    d = s.record.iter_dir(i)
    write_text(d / "candidate.diff", diff.text)
    transcript = getattr(proposal, "transcript", None)
    if (d / "transcript.json").is_file():  # the agent wrote its own (LLM agents do, turn by turn): keep it
        if error:
            write_text(d / "agent_error.txt", error)
    else:
        write_json(d / "transcript.json", {"transcript": transcript if transcript is not None else [], "error": error})
    o = verdict.outcome
    report = {
        "iteration": i, "summary": summary, "expected_gain": getattr(proposal, "expected_gain", ""),
        "accepted": verdict.decision.accepted, "reason": verdict.decision.reason, "commit": verdict.commit,
        "parent": s.worktree.head_sha() if verdict.commit is None else None,
        "changed_paths": list(diff.paths),
        "tunables": tunables, "gate_seed": verdict.gate_seed,
        "gate": None if o is None else {"ok": o.ok, "returncode": o.returncode, "timed_out": o.timed_out,
                                        "seconds": round(o.seconds, 2), "error": o.error,
                                        "stages": [{k: st.get(k) for k in ("name", "ok", "seconds", "error")}
                                                   for st in o.result.get("stages") or []]},
        "figures": figures(o.result) if o is not None else None,
        "cumulative_speedup": cumulative, "cost_usd": getattr(proposal, "cost_usd", 0.0),
        "tokens": getattr(proposal, "tokens", {}), "agent_seconds": round(agent_seconds, 2),
        "error": error, "started": started, "ended": utc_now(),
    }
    write_text(d / "report.md", iteration_markdown(s.target.name, s.record.run_id, report))
    write_json(d / "report.json", report)
    return report


def read_tunables(engine_dir: Path) -> dict | None:
    """The ``values`` of ``engine/tunables.json`` in ``engine_dir``, or None when the file is absent or unreadable."""
    f = engine_dir / "engine" / "tunables.json"
    try:
        return json.loads(f.read_text()).get("values")
    except (OSError, ValueError, AttributeError):
        return None

"""Iteration 0 of an upgrade: render the new target on its new branch, commit it naming where it came from, gate it.

The render commit's trailers (``Upgraded-From``, ``Upgraded-From-Commit``, ``Upgraded-From-Branch``,
``Facts-Digest``, ``Facts-Class``, ``Upgrade-Run``) record the old target and commit; it carries no
``Run-Id``/``Iteration`` trailers, so a resumed upgrade never mistakes it for a gated commit. The
baseline gate races the engine against a copy of itself (the build's noise run); a red baseline
ends the upgrade as ``failed`` with the branch kept for a resume.
"""

from __future__ import annotations

from metainfer.build.decision import commit_message
from metainfer.build.iteration import read_tunables, write_iteration
from metainfer.build.records import utc_now
from metainfer.build.report import write_summary_safely
from metainfer.build.session import Session
from metainfer.render import render_engine
from metainfer.upgrade.gate import judge


def render_commit(s: Session) -> str:
    """Render the new target into the worktree (unless the branch head has it) and commit it; return the head sha."""
    wt, up = s.worktree, s.record.state["upgrade"]
    wt.reset_clean()
    if wt.has_engine():
        return wt.head_sha()
    s.progress.line(0, f"rendering {s.target.name} from templates/engine/{s.target.model.family}")
    render_engine(s.target, wt.path / "generated", force=True, templates=s.root / "templates" / "engine")
    wt.stage_diff()
    f, t, fd = up["from"], up["to"], up["facts_diff"]
    summary = (f"Upgrade {f['target']} -> {t['target']}: render the engine from templates/engine/{s.target.model.family} "
               f"(facts change: {fd['class']})")
    tr = {"Upgraded-From": f["target"], "Upgraded-From-Commit": f["commit"], "Upgraded-From-Branch": f["branch"],
          "Facts-Digest": t["facts_digest"], "Facts-Class": fd["class"], "Upgrade-Run": s.record.run_id}
    return wt.commit(commit_message(summary, tr))


def render_and_gate(s: Session) -> bool:
    """Iteration 0: render + commit, then the baseline gate; True when it passed (``best`` set)."""
    st, started = s.record.state, utc_now()
    st["in_flight"] = {"iteration": 0, "gate_pid": None}
    s.save()
    sha = render_commit(s)
    diff = s.worktree.stage_diff()  # empty: the render is committed; the gate runs on the head
    summary = f"baseline: the upgraded engine at {sha[:10]} on {s.worktree.branch}"
    verdict = judge(s, 0, summary, diff, "", baseline=True)
    ok = verdict.decision.accepted
    if ok:
        st["baseline"] = {"iteration": 0, "commit": sha}
        st["best"] = {"iteration": 0, "commit": sha, "cumulative_speedup": 1.0}
    s.worktree.reset_clean()
    write_iteration(s, 0, summary=summary, diff=diff, verdict=verdict, started=started,
                    tunables=read_tunables(s.worktree.engine_dir), cumulative=1.0 if ok else None)
    s.progress.line(0, f"→ {'baseline ok' if ok else 'BASELINE FAILED'}: {verdict.decision.reason}")
    st["in_flight"], st["next_iteration"] = None, 1
    if not ok:
        st["status"], st["stop_reason"] = "failed", f"the upgraded engine's baseline did not pass: {verdict.decision.reason}"
        st["upgrade"]["phase"] = "baseline"
    s.save()
    write_summary_safely(s.record, lambda text: s.progress.line(None, text))
    return ok

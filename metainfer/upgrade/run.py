"""``metainfer upgrade``: the whole upgrade as one resumable run record (``runs/<run-id>/``, ``kind: upgrade``).

    diff facts (old engine's -> new model's); beyond the template: report and stop (no branch made)
    iteration 0: render the new target on metainfer/<new> (first commit names the old target and commit), gate it
    for each accepted commit of the old branch:  carry (3-way apply, gate vs head) -> kept
        else up to --repair-attempts agent repairs (brief: the failure, the conflict, the facts diff) -> repaired
        else dropped, with the reasons
    re-tune: the offline agent over the tunables the facts diff names; then the agent for the iterations left
    write the upgrade report (md/json/html) beside the run's summary

Progress lives in ``run.json`` under ``upgrade`` (phase, each carried commit's status and attempts),
saved before and after every iteration, so an interrupted upgrade resumes where it stopped; the
old branch is only read.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from metainfer.agents import BudgetExceeded, check_agent, default_agent_name
from metainfer.build.config import BuildConfig, BuildError
from metainfer.build.progress import Progress
from metainfer.build.records import RunRecord, utc_now
from metainfer.build.report import write_summary_safely
from metainfer.build.resume import open_session, recover, release_session
from metainfer.build.session import Session
from metainfer.upgrade import plan
from metainfer.upgrade.baseline import render_and_gate
from metainfer.upgrade.report import write_upgrade_report
from metainfer.upgrade.steps import RetuneAgent, agent_step, apply_3way, carry


@dataclass
class UpgradeConfig:
    """Options of ``metainfer upgrade`` (budgets and gate settings as ``metainfer build``).

    Attributes:
        target: old target name or its branch; None only on resume.
        to: new model (registry name, HF folder or config.json); None only on resume.
        checkpoint: the new model's checkpoint; None = a synthetic one (or ``to`` itself when it holds weights).
        agent, agent_options: the agent for repairs and the build iterations after the replay.
        repair_attempts: agent calls per carried commit that failed (0 = drop at once).
        iterations: iterations after the replay (re-tune first, then the agent); None = as many as the
            facts diff names tunables to re-tune (at most 4), 0 when it names none.
        parity_lengths, parity_steps: the gate's quick-parity flags (None = its full set).
    """

    target: str | None
    to: str | None
    checkpoint: Path | None = None
    agent: str | None = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    repair_attempts: int = 1
    iterations: int | None = None
    time_limit_min: float | None = None
    budget_usd: float | None = None
    runs_dir: Path = Path("runs")
    seed: int = 0
    gate_timeout_s: float | None = None
    gate_rounds: int | None = None
    gate_scale: str | None = None
    gate_workloads: tuple[str, ...] | None = None
    parity_lengths: tuple[int, ...] | None = None
    parity_steps: int | None = None
    resume: str | None = None
    repo_root: Path | None = None


def run_upgrade(cfg: UpgradeConfig, progress: Progress | None = None) -> RunRecord:
    """Run (or resume) an upgrade; ``state["status"]``: finished, beyond-template, failed, stopped, interrupted.

    Raises:
        BuildError, UnknownNameError, GpuMismatchError: before anything is written, for bad options.
        KeyboardInterrupt: after the state is saved (resume with ``--resume <run-id>``).
    """
    progress = progress or Progress()
    if cfg.agent is not None:  # an unknown name (the known ones listed) or missing credentials, before any record
        check_agent(cfg.agent, cfg.agent_options)
    if cfg.repair_attempts < 0:
        raise BuildError(f"--repair-attempts must be >= 0, got {cfg.repair_attempts}")
    bc = _build_config(cfg)
    if cfg.resume:
        s, _, _ = open_session(bc, progress)
        if s.record.state.get("kind") != "upgrade":
            raise BuildError(f"run {s.record.run_id} is not an upgrade; resume it with `metainfer build --resume`")
    else:
        if not cfg.target or not cfg.to:
            raise BuildError("--target and --to are required (unless --resume RUN)")
        root = bc.root()
        old = plan.resolve_old(root, cfg.target)
        new = plan.new_target(old, cfg.to)
        fd = plan.diff(old, new)
        up = _initial_state(old, new, fd, cfg)
        if fd.cls == "beyond":
            return _stop_beyond(bc, new, up, progress)
        if new.branch in [h.name for h in git.Repo(root).heads]:
            raise BuildError(branch_exists_message(root, bc.runs_path(), new.name, new.branch))
        bc.model, bc.quant, bc.gpu = new.model.source, new.quant.name, new.gpu.name
        bc.checkpoint = cfg.checkpoint or _weights_in(cfg.to)
        s, _, _ = open_session(bc, progress, agent_label=up["agent"])
        st = s.record.state
        st["kind"], st["upgrade"] = "upgrade", up
        st["gate"]["parity_lengths"] = list(cfg.parity_lengths) if cfg.parity_lengths else None
        st["gate"]["parity_steps"] = cfg.parity_steps
        st["iterations"] = up["after_replay"]
        s.save()
    try:
        return _drive(s, progress)
    finally:
        release_session(s)


def branch_exists_message(root: Path, runs: Path, target_name: str, branch: str) -> str:
    """Why a new upgrade to ``target_name`` is refused when its ``branch`` exists, and the ways on that work: resume
    the upgrade run that made it (when one is recorded and unfinished), or a command sequence that deletes the branch,
    removing first the worktree it is checked out in (``git branch -D`` refuses a branch checked out anywhere)."""
    run = None
    for f in sorted(Path(runs).glob(f"*-{target_name}/run.json"), reverse=True):  # ids start with a time stamp
        try:
            st = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if st.get("kind") == "upgrade":
            run = (f.parent.name, st.get("status"))
            break
    delete = f"git branch -D {branch}"
    wt = checked_out_at(root, branch)
    if wt is not None:
        delete = f"git worktree remove --force {wt} && {delete}"
    if run and run[1] not in ("finished", "beyond-template"):
        head = f"{branch} exists already, made by upgrade run {run[0]} ({run[1]}); continue it with `metainfer upgrade --resume {run[0]}`"
    elif run:
        head = f"{branch} exists already, made by upgrade run {run[0]} ({run[1]}); its engine is there"
    else:
        head = f"{branch} exists already; resume the upgrade that made it with `metainfer upgrade --resume RUN`"
    return f"{head}, or start again from scratch (its commits are lost) with `{delete}`"


def checked_out_at(root: Path, branch: str) -> Path | None:
    """The worktree of the repository at ``root`` that has ``branch`` checked out, or None."""
    out = git.Repo(root).git.worktree("list", "--porcelain")
    path = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = Path(line.removeprefix("worktree "))
        elif line == f"branch refs/heads/{branch}":
            return path
    return None


def _build_config(cfg: UpgradeConfig) -> BuildConfig:
    return BuildConfig(model=None, quant=None, gpu=None, agent=cfg.agent, agent_options=cfg.agent_options,
                       iterations=None, time_limit_min=cfg.time_limit_min, budget_usd=cfg.budget_usd,
                       runs_dir=cfg.runs_dir, checkpoint=cfg.checkpoint, seed=cfg.seed, gate_timeout_s=cfg.gate_timeout_s,
                       gate_rounds=cfg.gate_rounds, gate_scale=cfg.gate_scale, gate_workloads=cfg.gate_workloads,
                       resume=cfg.resume, repo_root=cfg.repo_root)


def _weights_in(to: str | None) -> Path | None:
    """``to`` as a checkpoint folder when it is one (config.json beside safetensors), else None."""
    p = Path(to or "")
    folder = p if p.is_dir() else p.parent if p.name == "config.json" else None
    return folder.resolve() if folder is not None and any(folder.glob("*.safetensors")) else None


def _initial_state(old: plan.OldEngine, new: Any, fd: Any, cfg: UpgradeConfig) -> dict[str, Any]:
    retune = fd.retune if fd.cls == "re-tune" else []
    after = cfg.iterations if cfg.iterations is not None else min(4, len(retune))
    return {
        "from": {"target": old.target, "branch": old.branch, "commit": old.head, "render_commit": old.render_commit,
                 "model_source": old.model_source, "facts_digest": old.facts.digest},
        "to": {"target": new.name, "branch": new.branch, "model_source": new.model.source,
               "facts_digest": new.model.facts(new.quant).digest},
        "facts_diff": fd.to_json(), "phase": "baseline", "agent": cfg.agent or default_agent_name(),
        "agent_options": cfg.agent_options, "repair_attempts": cfg.repair_attempts, "after_replay": after,
        "retune_left": min(after, len(retune)), "agent_calls": 0,
        "carry": [{"commit": c.sha, "summary": c.summary, "old_speedup": c.speedup, "status": "pending",
                   "attempts": [], "current": None, "reasons": []} for c in old.carried],
    }


def _stop_beyond(bc: BuildConfig, new: Any, up: dict[str, Any], progress: Progress) -> RunRecord:
    """Record a beyond-the-template upgrade without making a branch: the report says what must be written."""
    root = bc.root()
    record = RunRecord.create(bc.runs_path(), new.name, {
        "kind": "upgrade", "model": new.model.source, "quant": new.quant.name, "gpu": new.gpu.name, "agent": up["agent"],
        "iterations": 0, "seed": bc.seed, "branch": None, "repo_root": str(root), "upgrade": up})
    st = record.state
    up["phase"] = "done"
    st["status"] = "beyond-template"
    st["stop_reason"] = ("the new model has facts the template cannot express; nothing was rendered and no branch was "
                         f"made ({up['from']['branch']} is unchanged): see upgrade.md for what must be written")
    st["ended"] = utc_now()
    record.save()
    write_upgrade_report(record, root)
    progress.line(None, f"beyond-template: {st['stop_reason']}; report {record.path / 'upgrade.md'}")
    return record


def _drive(s: Session, progress: Progress) -> RunRecord:
    st = s.record.state
    up = st["upgrade"]
    agent = None
    try:
        recover(s)
        _reconcile(s)
        if up["phase"] == "baseline":
            if not render_and_gate(s):
                return s.record
            up["phase"] = "replay"
            s.save()
        if up["phase"] == "replay":
            agent = agent or _agent(s)
            for entry in up["carry"]:
                if entry["status"] in ("pending", "running"):
                    _carry_one(s, agent, entry)
            up["phase"] = "after"
            s.save()
        if up["phase"] == "after":
            agent = agent or _agent(s)
            retune = RetuneAgent(up["facts_diff"]["retune"])
            while st["next_iteration"] - _replay_iterations(up) - 1 < up["after_replay"]:
                use_retune = up["retune_left"] > 0
                i, call = st["next_iteration"], up["agent_calls"] + 1
                _begin(s, i)
                agent_step(s, retune if use_retune else agent, i, call, "re-tune" if use_retune else "build")
                up["agent_calls"] = call
                up["retune_left"] -= 1 if use_retune else 0
                _end(s, i)
            up["phase"] = "done"
        st["status"], st["stop_reason"] = "finished", _finish_reason(up)
    except BudgetExceeded as err:
        st["status"], st["stop_reason"] = "stopped", f"agent budget exceeded: {err}"
    except KeyboardInterrupt:
        st["status"], st["stop_reason"] = "interrupted", f"interrupted; continue with `metainfer upgrade --resume {s.record.run_id}`"
        raise
    except BaseException as err:
        st["status"], st["stop_reason"] = "crashed", f"{type(err).__name__}: {err}"
        raise
    finally:
        st["ended"] = utc_now()
        s.save()
        write_summary_safely(s.record, lambda text: s.progress.line(None, text))
        write_upgrade_report(s.record, s.root)
        progress.line(None, f"{st['status']}: {st['stop_reason']}; report {s.record.path / 'upgrade.md'}")
    return s.record


def _agent(s: Session) -> Any:
    from metainfer.build.loop import make_agent

    up = s.record.state["upgrade"]
    return make_agent(up["agent"], up.get("agent_options") or {}, s)


def _begin(s: Session, i: int) -> None:
    shutil.rmtree(s.record.path / f"iter-{i:03d}", ignore_errors=True)
    s.record.state["in_flight"] = {"iteration": i, "gate_pid": None}
    s.save()


def _end(s: Session, i: int) -> None:
    st = s.record.state
    st["in_flight"], st["next_iteration"] = None, i + 1
    s.save()
    write_summary_safely(s.record, lambda text: s.progress.line(None, text))
    write_upgrade_report(s.record, s.root)  # the report follows the replay step by step


def _replay_iterations(up: dict[str, Any]) -> int:
    return sum(len(e["attempts"]) for e in up["carry"])


def _carry_one(s: Session, agent: Any, entry: dict[str, Any]) -> None:
    """Carry one old commit: apply and gate; on failure up to ``repair_attempts`` agent repairs; else drop it."""
    st, up = s.record.state, s.record.state["upgrade"]
    old_rel = f"generated/{up['from']['target']}"
    entry["status"] = "running"
    if not entry["attempts"]:
        i = st["next_iteration"]
        entry["current"] = {"iteration": i, "kind": "carry"}
        _begin(s, i)
        res, conflict = carry(s, i, entry["commit"], entry["summary"], old_rel)
        _record_attempt(entry, i, "carry", res.report, conflict)
        _end(s, i)
    while not _settled(entry) and _repairs(entry) < up["repair_attempts"]:
        i, call = st["next_iteration"], up["agent_calls"] + 1
        entry["current"] = {"iteration": i, "kind": "repair"}
        _begin(s, i)
        patch = s.record.path / f"iter-{entry['attempts'][0]['iteration']:03d}" / "carried.patch"
        brief = _repair_brief(up, entry)
        res = agent_step(s, agent, i, call, f"repair {entry['commit'][:10]}", prepare=lambda: apply_3way(s, patch),
                         brief=brief, history_extra=[{"iteration": i, "summary": "repair brief", "accepted": False,
                                                      "reason": brief, "tunables": None}])
        up["agent_calls"] = call
        _record_attempt(entry, i, "repair", res.report, None)
        _end(s, i)
    last = entry["attempts"][-1]
    entry["status"] = ("kept" if last["kind"] == "carry" else "repaired") if last["accepted"] else "dropped"
    entry["current"] = None
    s.progress.line(None, f"{entry['commit'][:10]} {entry['status']}: {last['reason']}")
    s.save()


def _settled(entry: dict[str, Any]) -> bool:
    return bool(entry["attempts"]) and entry["attempts"][-1]["accepted"]


def _repairs(entry: dict[str, Any]) -> int:
    return sum(1 for a in entry["attempts"] if a["kind"] == "repair")


def _record_attempt(entry: dict[str, Any], i: int, kind: str, report: dict[str, Any], conflict: str | None) -> None:
    f = report.get("figures") or {}
    entry["attempts"].append({"iteration": i, "kind": kind, "accepted": report["accepted"], "reason": report["reason"],
                              "commit": report.get("commit"), "conflict": conflict,
                              "figures": {k: f.get(k) for k in ("parity_ok", "max_rel_err", "tolerance", "max_decode_rel_err",
                                                                "speedup", "noise")}})
    entry["reasons"].append(report["reason"])
    entry["current"] = None


def _reconcile(s: Session) -> None:
    """After ``recover``: an attempt whose report was written (or adopted) before the interruption is recorded."""
    st, up = s.record.state, s.record.state["upgrade"]
    for entry in up["carry"]:
        cur = entry.get("current")
        if not cur:
            continue
        f = s.record.path / f"iter-{cur['iteration']:03d}" / "report.json"
        if f.is_file() and st["next_iteration"] > cur["iteration"]:
            rep = json.loads(f.read_text())
            _record_attempt(entry, cur["iteration"], cur["kind"], rep, None)
        else:
            entry["current"] = None  # redone with the same iteration number
    s.save()


def _repair_brief(up: dict[str, Any], entry: dict[str, Any]) -> str:
    fd = up["facts_diff"]
    lines = [f"# Repair: carry {entry['commit'][:10]} ({entry['summary']}) onto {up['to']['target']}", "",
             f"It was accepted on {up['from']['branch']} and failed here: {entry['reasons'][-1]}", ""]
    conflict = next((a["conflict"] for a in entry["attempts"] if a.get("conflict")), None)
    if conflict:
        lines += ["The three-way apply left conflicts (markers are in the files):", "", "```", conflict, "```", ""]
    lines += [f"Facts that changed ({fd['class']}):", ""]
    lines += [f"- {c['field']}: {c['old']!r} -> {c['new']!r} ({c['cls']})" for c in fd["changes"]] or ["- none"]
    lines += ["", "Make the change work for the new facts (read shapes from DIMS, never hard-code them) or undo the part "
              "that cannot; the gate races the result against the branch head."]
    return "\n".join(lines) + "\n"


def _finish_reason(up: dict[str, Any]) -> str:
    counts = {k: sum(1 for e in up["carry"] if e["status"] == k) for k in ("kept", "repaired", "dropped")}
    return (f"upgraded {up['from']['target']} -> {up['to']['target']}: {counts['kept']} kept, {counts['repaired']} repaired, "
            f"{counts['dropped']} dropped of {len(up['carry'])} carried iteration(s)")

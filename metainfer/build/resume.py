"""Opening a run (new or resumed) and recovering from an interrupted one.

A run is resumable because every step saves ``run.json`` first: ``next_iteration`` is the
iteration to do, ``in_flight`` the one that was running when the process died (with its
gate's pid). On resume the orphaned gate is killed, a commit the dead process already made
for the in-flight iteration is adopted (never repeated), anything else is discarded and
that iteration is redone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metainfer.agents import check_agent, default_agent_name
from metainfer.build.budget import budget_stop
from metainfer.build.config import DEFAULT_GATE_TIMEOUT_S, BuildConfig, BuildError, worktree_path
from metainfer.build.decision import Decision, parse_trailers
from metainfer.build.gate_runner import GateOutcome, kill_orphan
from metainfer.build.iteration import Verdict, read_tunables, write_iteration
from metainfer.build.lock import lock_target, unlock_target
from metainfer.build.progress import Progress
from metainfer.build.records import RunRecord, utc_now
from metainfer.build.session import Session, ensure_checkpoint
from metainfer.build.worktree import CandidateDiff, TargetWorktree
from metainfer.targets import check_present, make_target

#: the resume command of the run this process opened last (``metainfer build`` prints it on Ctrl-C)
LAST_RESUME_COMMAND: list[str] = []


def resume_command(config: BuildConfig, run_id: str) -> str:
    """The exact command that continues run ``run_id`` (``--runs-dir`` included when it is not the default)."""
    cmd = f"metainfer build --resume {run_id}"
    if Path(config.runs_dir) != Path("runs"):
        cmd += f" --runs-dir {config.runs_path()}"
    return cmd


def open_session(config: BuildConfig, progress: Progress, agent_label: str | None = None,
                 require_clean: bool = True) -> tuple[Session, str, dict[str, Any]]:
    """Validate options, check the GPU, open or create the run record, the worktree and the checkpoint.

    On ``config.resume`` the target, agent, seed and gate settings come from ``run.json`` (a failed
    run retries its baseline, e.g. with a longer ``--gate-timeout``);
    a given ``config.iterations``, ``gate_timeout_s``, ``twin_periods``, ``time_limit_min``, ``budget_usd`` or ``agent``
    (with its options) replaces the run's. A new run refuses a worktree
    with uncommitted changes unless ``require_clean`` is False (``metainfer step``).

    Returns:
        the session, the agent's registry name and its options.

    Raises:
        GpuMismatchError, UnknownNameError, BuildError: before anything is written.
    """
    config.validate()
    root = config.root()
    runs = config.runs_path()
    if config.resume:
        record = RunRecord.open(runs, config.resume)
        st = record.state
        if st["status"] == "finished" and (config.iterations is None or config.iterations <= st["iterations"]):
            raise BuildError(f"run {record.run_id} is finished; pass --iterations above {st['iterations']} to extend it")
        given = {"time_limit_min": config.time_limit_min, "budget_usd": config.budget_usd}  # a limit given anew is the user's
        stop = budget_stop({k: st["budget"].get(k) if v is None else None for k, v in given.items()},
                           st.get("active_seconds", 0.0), st.get("cost_usd", 0.0))
        if stop:  # it would stop again before doing anything: say what continues it instead
            raise BuildError(f"run {record.run_id}: {stop.advice(resume_command(config, record.run_id))}")
        if config.agent is None:  # the run's own agent must still be able to start (a key set then, unset now)
            check_agent(st["agent"], st.get("agent_options"))
        check_present(st["gpu"])
        target = make_target(st["model"], st["quant"], st["gpu"])
        refuse_lost_branch(root, record, target.branch)
        lock_target(root, target.name)  # released by the caller (``release_session``) or at exit
        if config.iterations is not None:
            st["iterations"] = config.iterations
        if config.gate_timeout_s is not None:
            st["gate"]["timeout_s"] = config.gate_timeout_s
        if config.twin_periods is not None:
            st["gate"]["twin_periods"] = config.twin_periods
        if config.time_limit_min is not None:
            st["budget"]["time_limit_min"] = config.time_limit_min
        if config.budget_usd is not None:
            st["budget"]["budget_usd"] = config.budget_usd
        if config.agent is not None:  # e.g. new patches for the scripted agent: iteration k still applies patch k
            st["agent"], st["agent_options"] = config.agent, config.agent_options
        st["status"], st["stop_reason"], st["ended"] = "running", None, None
        st["active_seconds_before"] = st.get("active_seconds", 0.0)
        st.setdefault("resumed", []).append(utc_now())
        progress.line(None, f"resuming {record.run_id} at iteration {st['next_iteration']}")
    else:
        check_present(config.gpu, config.model)
        target = make_target(config.model, config.quant, config.gpu)
        lock_target(root, target.name)
        meta = {"model": config.model, "quant": config.quant, "gpu": config.gpu,
                "agent": agent_label or config.agent or default_agent_name(), "agent_options": config.agent_options,
                "iterations": 3 if config.iterations is None else config.iterations, "seed": config.seed,
                "budget": {"time_limit_min": config.time_limit_min, "budget_usd": config.budget_usd},
                "gate": {"timeout_s": DEFAULT_GATE_TIMEOUT_S if config.gate_timeout_s is None else config.gate_timeout_s,
                         "rounds": config.gate_rounds, "scale": config.gate_scale,
                         "workloads": list(config.gate_workloads) if config.gate_workloads else None,
                         "twin_periods": config.twin_periods},
                "checkpoint": str(config.checkpoint.resolve()) if config.checkpoint else None,
                "branch": target.branch, "repo_root": str(root)}
        wt = TargetWorktree(root, target.name, worktree_path(root, target.name)).ensure()
        if require_clean and wt.repo.is_dirty(untracked_files=True):
            unlock_target(root, target.name)
            raise BuildError(dirty_worktree_message(wt.path, runs, target.name))
        record = RunRecord.create(runs, target.name, meta)
    st = record.state
    st["resume_command"] = resume_command(config, record.run_id)
    LAST_RESUME_COMMAND[:] = [st["resume_command"]]
    try:
        return _prepare(config, progress, root, target, record)
    except BaseException as err:  # Ctrl-C (or a failure) while preparing, e.g. writing the checkpoint
        unlock_target(root, target.name)
        st["status"] = "interrupted" if isinstance(err, KeyboardInterrupt) else "crashed"
        st["stop_reason"] = (f"{st['status']} while preparing the run ({type(err).__name__}: {err}); "
                             f"continue with: {st['resume_command']}")
        st["ended"] = utc_now()
        record.save()
        progress.line(None, f"{st['status']}: {st['stop_reason']}")
        raise


def refuse_lost_branch(root: Path, record: RunRecord, branch: str) -> None:
    """Refuse to resume a run whose target branch was deleted (``git branch -D``, the README's reset) after the run
    committed to it: the worktree would be re-created at the checkout's HEAD, without the run's engine.

    Raises:
        BuildError: the branch is gone and the run had done an iteration; names the commit of its best engine, how to
            restore the branch from it while git still has it, and that a new build starts a fresh run.
    """
    import git

    st = record.state
    if branch in [h.name for h in git.Repo(root).heads]:
        return
    if not (st.get("best") or st.get("baseline") or st.get("next_iteration", 0) > 0):
        return  # nothing of the run was on the branch yet: re-creating it from HEAD loses nothing
    best = (st.get("best") or st.get("baseline") or {}).get("commit")
    fresh = (f"start a fresh run with `metainfer build --model {st['model']} --quant {st['quant']} --gpu {st['gpu']}` "
             f"(new records; the branch is made again from your checkout)")
    if not best:
        where = "no commit of its engine is recorded"
    else:
        try:
            git.Repo(root).commit(best)
            known = True
        except (ValueError, git.BadName, git.BadObject):
            known = False
        where = (f"its best engine was at commit {best[:10]}; "
                 + (f"restore the branch with `git branch {branch} {best}` and resume again, or "
                    if known else "git no longer has that commit; "))
    raise BuildError(f"cannot resume run {record.run_id}: its branch {branch} is gone (deleted after the run); {where}"
                     f"{'; ' if not best else ''}{fresh}")


def _prepare(config: BuildConfig, progress: Progress, root: Path, target: Any,
             record: RunRecord) -> tuple[Session, str, dict[str, Any]]:
    """The worktree, the session and (when the run has none) the cached synthetic checkpoint of an opened record."""
    st = record.state
    wt = TargetWorktree(root, target.name, worktree_path(root, target.name)).ensure()
    st["worktree"] = str(wt.path)
    ckpt = Path(st["checkpoint"]) if st.get("checkpoint") else None
    s = Session(config, target, root, wt, record, ckpt or Path(), progress)
    # the gate settings of a resumed run are the run's, not this command line's defaults
    config.seed, config.gate_timeout_s = st["seed"], st["gate"]["timeout_s"]
    config.gate_rounds, config.gate_scale = st["gate"]["rounds"], st["gate"]["scale"]
    config.gate_workloads = tuple(st["gate"]["workloads"]) if st["gate"].get("workloads") else None
    config.twin_periods = st["gate"].get("twin_periods")
    s.save()
    if ckpt is None:
        s.checkpoint = ensure_checkpoint(root, st["model"], st["quant"], st["seed"], progress)  # removes its partial files
        st["checkpoint"] = str(s.checkpoint)
        st["checkpoint_synthetic"] = True
        s.save()
    return s, st["agent"], st.get("agent_options") or {}


def recover(s: Session) -> None:
    """Settle an iteration left in flight by a killed process: kill its gate, adopt its commit or redo it."""
    st = s.record.state
    flight = st.get("in_flight")
    if not flight:
        s.worktree.reset_clean()
        return
    i, pid = flight["iteration"], flight.get("gate_pid")
    if pid and kill_orphan(pid):
        s.progress.line(i, f"killed the orphaned gate (pid {pid})")
    head = s.worktree.repo.head.commit
    tr = parse_trailers(head.message)
    if tr.get("Run-Id") == s.record.run_id and tr.get("Iteration") == str(i):
        _adopt(s, i, head)
    else:
        s.progress.line(i, "was interrupted before a verdict; redoing it")
        s.worktree.reset_clean()
    st["in_flight"] = None
    s.save()


def _adopt(s: Session, i: int, head: Any) -> None:
    """Record iteration ``i`` as accepted from the commit a killed process made (its gate.json is in the record)."""
    st = s.record.state
    result = s.record.gate_json(i)
    outcome = GateOutcome(result, 0, False, 0.0)
    reason = "accepted (commit made just before the run was interrupted; recovered on resume)"
    verdict = Verdict(Decision(True, reason), outcome, int(parse_trailers(head.message).get("Gate-Seed", 0)), head.hexsha)
    diff = CandidateDiff(tuple(head.stats.files), s.worktree.repo.git.show("--binary", "--format=", head.hexsha) + "\n")
    s.worktree.reset_clean()
    if i == 0:
        cumulative = 1.0
        st["baseline"] = {"iteration": 0, "commit": head.hexsha}
    else:
        cumulative = st["best"]["cumulative_speedup"] * (result.get("bench") or {}).get("objective", {}).get("speedup", 1.0)
    st["best"] = {"iteration": i, "commit": head.hexsha, "cumulative_speedup": cumulative}
    write_iteration(s, i, summary=head.summary, diff=diff, verdict=verdict, started=utc_now(),
                    tunables=read_tunables(s.worktree.engine_dir), cumulative=cumulative)
    st["next_iteration"] = i + 1
    s.progress.line(i, f"adopted commit {head.hexsha[:10]} made before the interruption")


def release_session(s: Session) -> None:
    """Give back the target's lock that ``open_session`` took (``metainfer.build.lock``)."""
    unlock_target(s.root, s.target.name)


def dirty_worktree_message(path: Path, runs: Path, target_name: str) -> str:
    """Why a new run refuses the worktree at ``path`` with uncommitted changes, and the three ways on."""
    left = _unfinished_run(runs, target_name)
    hint = (f"they are run {left[0]}'s candidate ({left[1]}): continue it with "
            f"`metainfer build --resume {left[0]}`, or " if left else "")
    return (f"the worktree {path} has uncommitted changes; {hint}gate them with `metainfer step` "
            f"or discard them with `git -C {path} reset --hard && git -C {path} clean -fd`")


def _unfinished_run(runs: Path, target_name: str) -> tuple[str, str] | None:
    """``(run id, status)`` of the newest run of ``target_name`` under ``runs`` that ended interrupted or crashed (its
    candidate is what a dirty worktree holds), or None."""
    import json

    for f in sorted(Path(runs).glob(f"*-{target_name}/run.json"), reverse=True):  # ids start with a time stamp
        try:
            st = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        return (f.parent.name, st.get("status")) if st.get("status") in ("interrupted", "crashed") else None
    return None

"""The build loop (DESIGN.md "The build loop"):

    baseline = gate(render(template) if the branch has no engine else branch head)   # iteration 0
    for i in next..N (stopping cleanly at a time or money limit):
        agent.propose(ctx)                       # edits the worktree
        diff = stage(worktree)                   # reject: outside generated/<target>/, harness changed
        result = gate(candidate vs best)         # subprocess, timeout
        commit(trailers) if accepted else reset  # branch metainfer/<target>
        record(i)                                # runs/<run-id>/iter-NNN/, run.json saved every step
"""

from __future__ import annotations

import importlib
import inspect
import shutil
import time
import traceback
from typing import Any

from harness.hashing import harness_digest
from metainfer.agents import AGENTS, BudgetExceeded, ProposalContext, check_agent, get_agent
from metainfer.build.budget import budget_stop
from metainfer.build.config import BuildConfig
from metainfer.build.decision import Decision
from metainfer.build.iteration import Verdict, judge, read_tunables, write_iteration
from metainfer.build.progress import Progress
from metainfer.build.records import RunRecord, utc_now
from metainfer.build.report import write_summary_safely
from metainfer.build.resume import open_session, recover, release_session
from metainfer.build.session import Session, render_into


def run_build(config: BuildConfig, progress: Progress | None = None) -> RunRecord:
    """Run (or with ``config.resume`` continue) a build and return its record; ``state["status"]`` says how it ended.

    Status: ``finished`` (all iterations ran), ``stopped`` (time or money limit, reason in
    ``stop_reason``), ``failed`` (the baseline did not pass), ``interrupted`` (Ctrl-C: resume it).

    Raises:
        GpuMismatchError, UnknownNameError, BuildError: before anything runs, for bad options.
        KeyboardInterrupt: after the state is saved.
    """
    if config.agent is not None:  # an unknown name or missing credentials: refused before anything is written
        check_agent(config.agent, config.agent_options)
    s, agent_name, agent_options = open_session(config, progress or Progress())
    st = s.record.state
    try:
        agent = make_agent(agent_name, agent_options, s)
        recover(s)
        if st["baseline"] is None and not baseline(s):
            return s.record
        while st["next_iteration"] <= st["iterations"]:
            stop = budget_stop(st["budget"], s.active_seconds(), st["cost_usd"])
            if stop:
                reason = stop.advice(st.get("resume_command") or f"metainfer build --resume {s.record.run_id}")
                st["status"], st["stop_reason"] = "stopped", reason
                s.progress.line(None, f"stopping: {reason}")
                break
            iterate(s, agent, st["next_iteration"])
        else:
            st["status"], st["stop_reason"] = "finished", f"ran {st['iterations']} iteration{'' if st['iterations'] == 1 else 's'}"
    except BudgetExceeded as err:
        st["status"], st["stop_reason"] = "stopped", f"agent budget exceeded: {err}"
        s.progress.line(None, f"stopping: {st['stop_reason']}")
    except KeyboardInterrupt:
        cmd = st.get("resume_command") or f"metainfer build --resume {s.record.run_id}"
        st["status"], st["stop_reason"] = "interrupted", f"interrupted at iteration {st['next_iteration']}; continue with: {cmd}"
        raise
    except BaseException as err:
        st["status"], st["stop_reason"] = "crashed", f"{type(err).__name__}: {err}"
        raise
    finally:
        st["ended"] = utc_now()
        s.save()
        write_summary_safely(s.record, lambda text: s.progress.line(None, text))  # never hides how the run ended
        s.progress.line(None, f"{st['status']}: {st['stop_reason']}; record {s.record.path}")
        release_session(s)
    return s.record


def make_agent(name: str, options: dict[str, Any], s: Session) -> Any:
    """``get_agent(name, **options)``, plus the run's checkpoint and gate timeout for agents that take them
    (the LLM agents run the gate themselves as a tool).

    Raises:
        UnknownNameError: unknown agent name.
    """
    if name not in AGENTS:
        return get_agent(name, **options)  # raises UnknownNameError listing the known agents
    module, cls = AGENTS[name].split(":")
    params = inspect.signature(getattr(importlib.import_module(module), cls)).parameters
    extras = {"checkpoint": s.checkpoint, "gate_timeout_s": s.config.gate_timeout_s}
    return get_agent(name, **{**{k: v for k, v in extras.items() if k in params}, **options})


def _fresh_iter_dir(s: Session, i: int) -> None:
    """Empty ``iter-NNN/`` before an iteration starts, so a redone iteration keeps nothing of the interrupted try."""
    shutil.rmtree(s.record.path / f"iter-{i:03d}", ignore_errors=True)


def baseline(s: Session) -> bool:
    """Iteration 0: render the engine if the branch has none, gate it against itself; True if it passed."""
    st, wt, started = s.record.state, s.worktree, utc_now()
    _fresh_iter_dir(s, 0)
    st["in_flight"] = {"iteration": 0, "gate_pid": None}
    s.save()
    wt.reset_clean()
    if wt.has_engine():
        summary = f"baseline: the engine at {wt.head_sha()[:10]} on {wt.branch}"
    else:
        s.progress.line(0, f"rendering {s.target.name} from templates/engine/{s.target.model.family}")
        render_into(s.root, s.target, wt)
        summary = f"Render the {s.target.name} engine from templates/engine/{s.target.model.family}"
    diff = wt.stage_diff()
    s.progress.line(0, summary)
    verdict = judge(s, 0, summary, diff, "", baseline=True)
    if verdict.decision.accepted:
        st["baseline"] = {"iteration": 0, "commit": verdict.commit}
        st["best"] = {"iteration": 0, "commit": verdict.commit, "cumulative_speedup": 1.0}
    wt.reset_clean()
    write_iteration(s, 0, summary=summary, diff=diff, verdict=verdict, started=started,
                    tunables=read_tunables(wt.engine_dir), cumulative=1.0 if verdict.decision.accepted else None)
    s.progress.line(0, f"→ {'baseline ok' if verdict.decision.accepted else 'BASELINE FAILED'}: {verdict.decision.reason}")
    st["in_flight"] = None
    st["next_iteration"] = 1
    if not verdict.decision.accepted:
        st["status"], st["stop_reason"] = "failed", f"the baseline did not pass: {verdict.decision.reason}"
    s.save()
    write_summary_safely(s.record, lambda text: s.progress.line(None, text))
    return verdict.decision.accepted


def iterate(s: Session, agent: Any, i: int) -> None:
    """Iteration ``i`` >= 1: propose, check, gate, commit or reset, record; re-raises ``BudgetExceeded`` once recorded."""
    st, wt, started = s.record.state, s.worktree, utc_now()
    _fresh_iter_dir(s, i)
    st["in_flight"] = {"iteration": i, "gate_pid": None}
    s.save()
    wt.reset_clean()
    harness_before = harness_digest(wt.path / "harness")
    ctx = _context(s, i)
    s.progress.line(i, f"propose ({getattr(agent, 'name', type(agent).__name__)} agent)")
    t0 = time.monotonic()
    proposal, error, stop = None, None, None
    try:
        proposal = agent.propose(ctx)
    except BudgetExceeded as err:
        stop, error = err, traceback.format_exc()
    except Exception as err:  # an agent's crash is a rejected iteration, never a lost run
        error = traceback.format_exc()
        s.progress.line(i, f"agent error: {type(err).__name__}: {err}")
    agent_s = time.monotonic() - t0
    st["cost_usd"] = st["cost_usd"] + (proposal.cost_usd if proposal else 0.0)
    diff = wt.stage_diff()
    tunables = read_tunables(wt.engine_dir)
    summary = proposal.summary if proposal else f"(agent {'stopped' if stop else 'failed'})"
    if stop is not None:
        verdict = Verdict(Decision(False, f"stopped: {stop}"))
    elif error is not None:
        verdict = Verdict(Decision(False, f"agent error: {error.strip().splitlines()[-1]}"))
    elif not proposal.changed and not diff.paths:
        verdict = Verdict(Decision(False, "the agent made no change"))
    else:
        s.progress.line(i, f"proposal ({agent_s:.1f}s): {summary}")
        verdict = judge(s, i, summary, diff, harness_before)
    best = st["best"]
    cumulative = best["cumulative_speedup"]
    if verdict.decision.accepted:
        cumulative = cumulative * verdict.outcome.result["bench"]["objective"]["speedup"]
        st["best"] = {"iteration": i, "commit": verdict.commit, "cumulative_speedup": cumulative}
    wt.reset_clean()
    write_iteration(s, i, summary=summary, diff=diff, verdict=verdict, proposal=proposal, error=error, started=started,
                    agent_seconds=agent_s, tunables=tunables, cumulative=cumulative)
    tag = f"accepted as {verdict.commit[:10]}" if verdict.decision.accepted else "rejected"
    s.progress.line(i, f"→ {tag} ({verdict.decision.reason})")
    st["in_flight"] = None
    st["next_iteration"] = i + 1
    s.save()
    write_summary_safely(s.record, lambda text: s.progress.line(None, text))
    if stop is not None:
        raise stop


def _context(s: Session, i: int) -> ProposalContext:
    """The agent's view of iteration ``i``: history, best gate JSON, limits."""
    st, c = s.record.state, s.config
    limit = st["budget"].get("time_limit_min")
    usd = st["budget"].get("budget_usd")
    return ProposalContext(
        target=s.target, worktree=s.worktree.path, engine_dir=s.worktree.engine_dir, iteration=i,
        history=s.record.history(), best=s.record.gate_json(st["best"]["iteration"]), record_dir=s.record.iter_dir(i),
        seed=st["seed"], deadline=None if limit is None else time.time() + max(0.0, limit * 60 - s.active_seconds()),
        budget_usd_left=None if usd is None else max(0.0, usd - st["cost_usd"]),
    )

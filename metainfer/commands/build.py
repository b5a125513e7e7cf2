"""``metainfer build``: generate the target's engine with an agent, one gated commit per accepted iteration."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import typer

from metainfer.agents import default_agent_name


def build(
    model: str = typer.Option(None, "--model", help="registered model, e.g. qwen3.6-35b-a3b-tiny (see `metainfer targets`); "
                              "required unless --resume"),
    quant: str = typer.Option(None, "--quant", help="weight format: bf16 or nvfp4; required unless --resume"),
    gpu: str = typer.Option(None, "--gpu", help="GPU profile; must be the device present (cpu is always allowed); "
                            "required unless --resume"),
    agent: str = typer.Option(None, "--agent", help="offline | scripted | anthropic | claude-code; default: anthropic "
                              "with ANTHROPIC_API_KEY set, else offline; on --resume: the run's"),
    iterations: int = typer.Option(None, "--iterations", help="proposals after the baseline (default 3; on --resume: the run's)"),
    time_limit: float = typer.Option(None, "--time-limit", help="minutes: stop at the first iteration boundary after this "
                                     "much working time (resumes included); the run is `stopped`, resumable"),
    budget_usd: float = typer.Option(None, "--budget-usd", help="USD: stop once the agent has spent this much (LLM agents; "
                                     "the offline and scripted agents cost nothing)"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="folder of run records (relative to the repo root)"),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="checkpoint folder; default: a seeded synthetic one, cached "
                                    "under .metainfer/checkpoints"),
    seed: int = typer.Option(0, "--seed", help="seed of the synthetic checkpoint, the agent's search and the gate's inputs"),
    gate_timeout: float = typer.Option(None, "--gate-timeout", help="seconds before a gate run is killed (a rejected "
                                       "iteration); default 3600, on --resume the run's"),
    rounds: int = typer.Option(None, "--rounds", help="A/B benchmark rounds per gate (default: the gate's)"),
    scale: str = typer.Option(None, "--scale", help="benchmark workloads: cpu (scaled down) or full (default: the gate's)"),
    workloads: str = typer.Option(None, "--workloads", help="comma list of gate workloads (ttft, decode-bs1, conc32, conc64, conc128, ttft-2k, ttft-8k, prefill-16k; default: ttft,decode-bs1,conc32)"),
    twin_periods: int = typer.Option(None, "--twin-periods", help="the gate's twin stage: the candidate's edits on the "
                                     "model cut to N layer periods, judged against float32 (docs/PARITY.md); 0 = off; "
                                     "default: 1 on a GPU for a full-size model, else off"),
    resume: str = typer.Option(None, "--resume", help="run id (or folder) of an interrupted, stopped or failed run to "
                               "continue; its options are the run's, except those given again"),
    script: list[Path] = typer.Option(None, "--script", help="scripted agent: patch files (or folders of them), applied "
                                      "in order, patch k in iteration k; repository-relative paths"),
    dry_run: bool = typer.Option(False, "--dry-run", help="print the plan (checkpoint to write or reuse and its size, "
                                 "engine, gates, workloads, estimated time here) and exit; writes nothing"),
    full_size_on_cpu: bool = typer.Option(False, "--full-size-on-cpu", help="allow a full-size model with --gpu cpu "
                                          "(a ~25 GB checkpoint and hours of parity; refused without this flag)"),
) -> None:
    """Build an engine for <model>-<quant>-<gpu>: baseline, then N agent proposals, each gated (static → parity → A/B bench).

    Accepted candidates are committed on branch metainfer/<target> in the worktree .metainfer/worktrees/<target>;
    your checkout and current branch are never touched. The record goes to runs/<run-id>/.
    """
    from metainfer.build import BuildConfig, run_build
    from metainfer.build.plan import make_plan, refuse_full_size_on_cpu

    if not resume and None in (model, quant, gpu):
        raise typer.BadParameter("--model, --quant and --gpu are required (unless --resume RUN)")
    if not resume and not dry_run:
        refuse_full_size_on_cpu(model, quant, gpu, full_size_on_cpu)
    options: dict = {}
    name = agent
    if script:
        if agent not in (None, "scripted"):
            raise typer.BadParameter("--script goes with --agent scripted")
        name = "scripted"
        options["patches"] = [str(p.resolve()) for p in script]
    elif agent == "scripted":
        raise typer.BadParameter("--agent scripted needs --script PATCH (one or more)")
    if name is None and not resume:
        name = default_agent_name()
    config = BuildConfig(model=model, quant=quant, gpu=gpu, agent=name, agent_options=options, iterations=iterations,
                         time_limit_min=time_limit, budget_usd=budget_usd, runs_dir=runs_dir, checkpoint=checkpoint,
                         seed=seed, gate_timeout_s=gate_timeout, gate_rounds=rounds, gate_scale=scale, resume=resume,
                         gate_workloads=tuple(workloads.split(",")) if workloads else None, twin_periods=twin_periods)
    if rounds is not None and rounds < 3:
        typer.secho(f"warning: --rounds {rounds}: with fewer than 3 A/B rounds a gate's noise bar rests on "
                    f"{'one sample (it reads 0)' if rounds == 1 else 'two samples'}; use 3 or more for a decision",
                    fg="yellow", err=True)
    if dry_run:
        from metainfer.agents import AGENTS, check_agent
        from metainfer.errors import MetainferError
        from metainfer.targets import check_present

        if name is not None and name not in AGENTS:
            check_agent(name)  # the real run's refusal, before the plan: UnknownNameError listing the known agents
        plan = make_plan(config)
        typer.echo("\n".join(plan.lines()))
        refused = False
        if name is not None:
            try:
                check_agent(name, options)  # credentials: the real run refuses them before any record
            except MetainferError as err:
                typer.echo(f"  refused    : {err}")
                refused = True
        try:
            check_present(gpu, model)
        except MetainferError as err:
            typer.echo(f"  refused    : {err}")
            refused = True
        dirty = plan.dirty_worktree
        if dirty:  # what the real run would refuse first (metainfer.build.resume.open_session)
            typer.echo(f"  refused    : {dirty}")
            refused = True
        if gpu == "cpu" and not full_size_on_cpu:
            try:
                refuse_full_size_on_cpu(model, quant, gpu, False)
            except Exception as err:  # the plan stands; say that the real run would be refused
                typer.echo(f"  refused    : {err}")
                refused = True
        if refused:  # the status the real run's refusal would exit with, so a script can tell
            sys.exit(2)
        return
    _terminate_as_interrupt()
    try:
        record = run_build(config)
    except KeyboardInterrupt:
        typer.secho("\ninterrupted: the run is marked `interrupted`"
                    + (f"; continue with: {_resume_hint()}" if _resume_hint() else ""), fg="yellow", err=True)
        sys.exit(130)
    typer.echo(f"run record: {record.path}\nreport: {record.path / 'summary.html'}  (open it in a browser; "
               f"`metainfer report {record.run_id}` rewrites it)")
    if record.state["status"] in ("failed", "crashed"):
        sys.exit(1)


def _resume_hint() -> str | None:
    """The exact resume command of the run this process was building (from ``metainfer.build.resume``), if any."""
    from metainfer.build.resume import LAST_RESUME_COMMAND

    return LAST_RESUME_COMMAND[0] if LAST_RESUME_COMMAND else None


def _terminate_as_interrupt() -> None:
    """SIGTERM and SIGHUP (a closed terminal, ``timeout``, a scheduler) end the build like Ctrl-C: the run is marked
    ``interrupted``, the gate is killed and temporary exports are removed on the way out."""

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def register(app: typer.Typer) -> None:
    """Add ``build`` to the app."""
    app.command("build")(build)

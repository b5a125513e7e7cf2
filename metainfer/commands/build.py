"""``metainfer build``: generate the target's engine with an agent, one gated commit per accepted iteration."""

from __future__ import annotations

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
    time_limit: float = typer.Option(None, "--time-limit", help="stop at an iteration boundary after this many minutes"),
    budget_usd: float = typer.Option(None, "--budget-usd", help="stop once the agent has spent this many USD"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="folder of run records (relative to the repo root)"),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="checkpoint folder; default: a seeded synthetic one, cached "
                                    "under .metainfer/checkpoints"),
    seed: int = typer.Option(0, "--seed", help="seed of the synthetic checkpoint, the agent's search and the gate's inputs"),
    gate_timeout: float = typer.Option(None, "--gate-timeout", help="seconds before a gate run is killed (a rejected "
                                       "iteration); default 3600, on --resume the run's"),
    rounds: int = typer.Option(None, "--rounds", help="A/B benchmark rounds per gate (default: the gate's)"),
    scale: str = typer.Option(None, "--scale", help="benchmark workloads: cpu (scaled down) or full (default: the gate's)"),
    workloads: str = typer.Option(None, "--workloads", help="comma list of ttft,decode-bs1,conc32 (default: all)"),
    resume: str = typer.Option(None, "--resume", help="run id (or folder) of an interrupted run to continue"),
    script: list[Path] = typer.Option(None, "--script", help="scripted agent: patch files (or folders of them), applied "
                                      "in order, patch k in iteration k; repository-relative paths"),
) -> None:
    """Build an engine for <model>-<quant>-<gpu>: baseline, then N agent proposals, each gated (static → parity → A/B bench).

    Accepted candidates are committed on branch metainfer/<target> in the worktree .metainfer/worktrees/<target>;
    your checkout and current branch are never touched. The record goes to runs/<run-id>/.
    """
    from metainfer.build import BuildConfig, run_build

    if not resume and None in (model, quant, gpu):
        raise typer.BadParameter("--model, --quant and --gpu are required (unless --resume RUN)")
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
                         gate_workloads=tuple(workloads.split(",")) if workloads else None)
    record = run_build(config)
    typer.echo(f"run record: {record.path}\nsummary: {record.path / 'summary.md'}\nhtml: {record.path / 'summary.html'}")
    if record.state["status"] == "failed":
        sys.exit(1)


def register(app: typer.Typer) -> None:
    """Add ``build`` to the app."""
    app.command("build")(build)

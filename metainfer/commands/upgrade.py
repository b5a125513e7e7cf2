"""``metainfer upgrade``: carry a generated engine and its accepted iterations to a changed model (or new weights)."""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def upgrade(
    target: str = typer.Option(None, "--target", help="the engine to upgrade: its target (qwen3.5-35b-a3b-tiny-bf16-cpu) "
                               "or branch (metainfer/<target>); required unless --resume"),
    to: str = typer.Option(None, "--to", help="the new model: a registered name, an HF model folder or its config.json; "
                           "leave out with --checkpoint for new weights of the same model"),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="the new model's checkpoint folder (default: the --to folder "
                                    "when it holds weights, else a seeded synthetic one); alone: re-gate the engine on it"),
    agent: str = typer.Option(None, "--agent", help="agent for repairs and the iterations after the replay: offline | "
                              "scripted | anthropic | claude-code (default as build)"),
    script: list[Path] = typer.Option(None, "--script", help="scripted agent: patch k is its k-th call (repairs, then builds)"),
    repair_attempts: int = typer.Option(1, "--repair-attempts", help="agent repairs per carried iteration that failed (0: drop)"),
    iterations: int = typer.Option(None, "--iterations", help="iterations after the replay: re-tune first, then the agent "
                                   "(default: the tunables the facts diff names, at most 4)"),
    time_limit: float = typer.Option(None, "--time-limit", help="stop at an iteration boundary after this many minutes"),
    budget_usd: float = typer.Option(None, "--budget-usd", help="stop once the agent has spent this many USD"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="folder of run records (relative to the repo root)"),
    seed: int = typer.Option(0, "--seed", help="seed of the synthetic checkpoint, the agents and the gate's inputs"),
    gate_timeout: float = typer.Option(None, "--gate-timeout", help="seconds before a gate run is killed (default 3600)"),
    rounds: int = typer.Option(None, "--rounds", help="A/B benchmark rounds per gate (default: the gate's)"),
    scale: str = typer.Option(None, "--scale", help="benchmark workloads: cpu or full (default: the gate's)"),
    workloads: str = typer.Option(None, "--workloads", help="comma list of gate workloads (ttft, decode-bs1, conc32, conc64, conc128, ttft-2k, ttft-8k, prefill-16k; default: ttft,decode-bs1,conc32)"),
    parity_lengths: str = typer.Option(None, "--parity-lengths", help="comma list of parity prompt lengths (default: the "
                                       "gate's full set, docs/PARITY.md)"),
    parity_steps: int = typer.Option(None, "--parity-steps", help="teacher-forced decode steps per parity prompt"),
    resume: str = typer.Option(None, "--resume", help="run id (or folder) of an interrupted upgrade to continue"),
) -> None:
    """Upgrade <target>'s engine to a new model: diff the model facts, render the new target on metainfer/<new-target>,
    replay the old branch's accepted iterations one at a time (each re-gated; kept, repaired by the agent, or dropped),
    re-tune what the changed shapes ask for, and write runs/<run-id>/upgrade.{md,json,html}. The old branch is only read.
    """
    options: dict = {}
    name = agent
    if script:
        if agent not in (None, "scripted"):
            raise typer.BadParameter("--script goes with --agent scripted")
        name, options["patches"] = "scripted", [str(p.resolve()) for p in script]
    common = dict(time_limit_min=time_limit, budget_usd=budget_usd, runs_dir=runs_dir, seed=seed, gate_timeout_s=gate_timeout,
                  gate_rounds=rounds, gate_scale=scale, gate_workloads=tuple(workloads.split(",")) if workloads else None,
                  parity_lengths=tuple(int(x) for x in parity_lengths.split(",")) if parity_lengths else None,
                  parity_steps=parity_steps)
    if checkpoint is not None and to is None and not resume:
        from metainfer.upgrade.reweigh import reweigh

        if target is None:
            raise typer.BadParameter("--checkpoint alone re-gates an engine on new weights: give --target too")
        rec = reweigh(target, checkpoint, **common)
    else:
        from metainfer.upgrade.run import UpgradeConfig, run_upgrade

        cfg = UpgradeConfig(target=target, to=to, checkpoint=checkpoint, agent=name, agent_options=options,
                            repair_attempts=repair_attempts, iterations=iterations, resume=resume, **common)
        rec = run_upgrade(cfg)
    typer.echo(f"run record: {rec.path}\nupgrade report: {rec.path / 'upgrade.md'}\nhtml: {rec.path / 'upgrade.html'}")
    if rec.state["status"] in ("failed", "beyond-template", "refused"):
        sys.exit(1)


def register(app: typer.Typer) -> None:
    """Add ``upgrade`` to the app."""
    app.command("upgrade")(upgrade)

"""``metainfer step``: gate and (if accepted) commit what a person or an outside agent changed in the target's worktree."""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def step(
    model: str = typer.Option(..., "--model", help="registered model (see `metainfer targets`)"),
    quant: str = typer.Option(..., "--quant", help="weight format: bf16 or nvfp4"),
    gpu: str = typer.Option(..., "--gpu", help="GPU profile; must be the device present (cpu is always allowed)"),
    message: str = typer.Option("manual change", "--message", "-m", help="one-line summary: the commit message if accepted"),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="checkpoint folder; default: the cached synthetic one"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="folder of run records (relative to the repo root)"),
    seed: int = typer.Option(0, "--seed", help="seed of the synthetic checkpoint and the gate's inputs"),
    gate_timeout: float = typer.Option(None, "--gate-timeout", help="seconds before the gate is killed (default 3600)"),
    rounds: int = typer.Option(None, "--rounds", help="A/B benchmark rounds (default: the gate's)"),
) -> None:
    """Gate the uncommitted change in the worktree <repo>/.metainfer/worktrees/<model>-<quant>-<gpu>/ (branch
    metainfer/<model>-<quant>-<gpu>) against the branch head; commit it there if parity holds and it is faster.

    Edit files under generated/<target>/ in that worktree (and nothing else), then run this. A rejected change
    stays in the worktree. The result is recorded as a one-iteration run under runs/.
    """
    from metainfer.build import BuildConfig, run_step

    config = BuildConfig(model=model, quant=quant, gpu=gpu, agent="step", runs_dir=runs_dir, checkpoint=checkpoint,
                         seed=seed, gate_timeout_s=gate_timeout, gate_rounds=rounds)
    record = run_step(config, message)
    typer.echo(f"run record: {record.path}")
    r = record.history()[-1]
    if not r["accepted"]:
        sys.exit(1)


def register(app: typer.Typer) -> None:
    """Add ``step`` to the app."""
    app.command("step")(step)

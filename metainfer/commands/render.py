"""``metainfer render``: turn the engine scaffold into ``generated/<target>/`` for one target."""

from __future__ import annotations

from pathlib import Path

import typer

from metainfer.errors import MetainferError
from metainfer.render import render_engine
from metainfer.targets import make_target


def render(
    model: str = typer.Option(..., "--model", help="registered model name, e.g. qwen3.6-35b-a3b (see `metainfer targets`)"),
    quant: str = typer.Option(..., "--quant", help="weight format: bf16 or nvfp4"),
    gpu: str = typer.Option(..., "--gpu", help="GPU profile: cpu, h100, h200, b200"),
    out: Path = typer.Option(Path("generated"), "--out", help="parent folder of the per-target engine folders"),
    force: bool = typer.Option(False, "--force", help="replace the target folder if it exists"),
) -> None:
    """Render templates/engine/<family>/ into <out>/<model>-<quant>-<gpu>/ (jinja2 for *.j2, copies for the rest)."""
    target = make_target(model, quant, gpu)
    try:
        dest = render_engine(target, out, force=force)
    except (FileExistsError, FileNotFoundError) as err:
        raise MetainferError(str(err)) from None
    typer.echo(f"rendered {target.name} -> {dest}")


def register(app: typer.Typer) -> None:
    """Add ``render`` to the app."""
    app.command("render")(render)

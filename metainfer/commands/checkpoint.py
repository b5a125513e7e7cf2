"""``metainfer checkpoint``: write a synthetic checkpoint with seeded random weights in the real HF layout."""

from __future__ import annotations

from pathlib import Path

import typer

from metainfer.targets import get_model, get_quant


def checkpoint(
    model: str = typer.Option(..., "--model", help="registry model name, e.g. qwen3.6-35b-a3b or qwen3.6-35b-a3b-tiny"),
    quant: str = typer.Option(..., "--quant", help="weight format: bf16 or nvfp4 (ModelOpt layout)"),
    out: Path = typer.Option(..., "--out", help="folder to write (must be empty unless --force)"),
    seed: int = typer.Option(0, "--seed", help="weights depend only on the seed and the tensor name"),
    force: bool = typer.Option(False, "--force", help="overwrite the checkpoint files of a non-empty folder"),
) -> None:
    """Write a checkpoint (config.json, safetensors shards, index; NVFP4: ModelOpt quant configs) with seeded random weights.

    Full size is about 71 GB bf16 / 25 GB NVFP4; peak memory is about one 4 GB shard plus one
    layer's experts (a full-width layer peaked at 4.3 GB with 1 GB shards).
    """
    from metainfer.checkpoint import CheckpointReader, write_checkpoint

    spec, fmt = get_model(model), get_quant(quant)
    path = write_checkpoint(spec, fmt, out, seed, force=force)
    CheckpointReader(path).validate()
    typer.echo(f"wrote {spec.name} {fmt.name} checkpoint (seed {seed}) to {path}")


def register(app: typer.Typer) -> None:
    """Add ``checkpoint`` to the app."""
    app.command("checkpoint")(checkpoint)

"""``metainfer parity``: run the parity stage alone (docs/PARITY.md); exit 0 on a pass, 1 on a fail, 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from metainfer.errors import MetainferError, check_checkpoint_folder


class ParityInputError(MetainferError):
    """A bad argument to ``metainfer parity``."""


def parity(
    engine: Path = typer.Option(..., "--engine", help="target folder holding the engine package (generated/<target>)"),
    checkpoint: Path = typer.Option(..., "--checkpoint", help="HF-format checkpoint folder"),
    json_out: Optional[Path] = typer.Option(None, "--json", help="write the parity block as JSON here"),
    seed: Optional[int] = typer.Option(None, "--seed", help="prompt seed; default: a fresh one, printed and recorded"),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda[:N]; engine and reference both run there"),
    reference_dtype: Optional[str] = typer.Option(
        None, "--reference-dtype", help="float32 or bfloat16; default float32, bfloat16 on a GPU too small for fp32"
    ),
    reference_device: Optional[str] = typer.Option(
        None, "--reference-device", help="run the reference elsewhere, e.g. cuda:1 (default: --device)"
    ),
    lengths: Optional[str] = typer.Option(None, "--lengths", help="comma list of prompt lengths for a quick check (default: docs/PARITY.md)"),
    steps: Optional[int] = typer.Option(None, "--steps", help="teacher-forced decode steps per prompt (default 16)"),
    prompt_nonce: Optional[int] = typer.Option(None, "--prompt-nonce", help="reproduce a run: the nonce it printed (default: a fresh secret one)"),
) -> None:
    """Compare an engine's logits and greedy tokens with HF transformers on fresh seeded prompts."""
    from harness.parity import format_table, run_parity

    if not engine.is_dir():
        from metainfer.build.config import built_engine_hint

        raise ParityInputError(f"--engine {engine} is not a folder; pass generated/<target> from `metainfer render`"
                               + built_engine_hint(engine))
    check_checkpoint_folder(checkpoint)
    for flag, dev in (("--device", device), ("--reference-device", reference_device or device)):
        if dev.split(":")[0] not in ("cpu", "cuda"):
            raise ParityInputError(f"{flag} {dev!r}: use cpu or cuda[:N]")
    if reference_dtype not in (None, "float32", "bfloat16"):
        raise ParityInputError(f"--reference-dtype {reference_dtype!r}: use float32 or bfloat16")
    quick: dict = {}
    if lengths is not None:
        try:
            quick["lengths"] = tuple(int(x) for x in lengths.split(","))
        except ValueError:
            raise ParityInputError(f"--lengths {lengths!r}: expected comma-separated integers such as 1,64,65") from None
    if steps is not None:
        if steps < 1:
            raise ParityInputError(f"--steps {steps}: must be at least 1")
        quick["steps"] = steps
    from harness.gate import cpu_threads

    cpu_threads("cpu" if device == "cpu" and (reference_device or "cpu") == "cpu" else "cuda")  # as the gate does
    try:
        result = run_parity(engine, checkpoint, seed=seed, device=device, reference_dtype=reference_dtype,
                            reference_device=reference_device, prompt_nonce=prompt_nonce, **quick)
    except ValueError as err:  # bad lengths, or the engine refused the checkpoint or device at load
        raise ParityInputError(f"parity could not start: {err}") from err
    typer.echo(format_table(result))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    raise typer.Exit(0 if result.ok else 1)


def register(app: typer.Typer) -> None:
    """Add ``parity`` to the app."""
    app.command("parity")(parity)

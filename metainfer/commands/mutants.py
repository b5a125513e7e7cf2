"""``metainfer mutants``: run the mutation suite (metainfer/mutants/) and print its table and score."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import typer

from metainfer.errors import MetainferError


def mutants(
    model: str = typer.Option("qwen3.6-35b-a3b-tiny", "--model", help="registered model name"),
    quant: str = typer.Option("nvfp4", "--quant", help="weight format: bf16 or nvfp4"),
    gpu: str = typer.Option("cpu", "--gpu", help="GPU profile the engine is rendered for (cpu, h200, ...)"),
    engine: Path = typer.Option(None, "--engine", help="target folder holding engine/ (default: a fresh render in a temp dir)"),
    checkpoint: Path = typer.Option(None, "--checkpoint", help="checkpoint folder (default: a synthetic one, seed 1234, "
                                    "written to a temp dir)"),
    only: list[str] = typer.Option(None, "--only", help="run only this mutant (repeatable)"),
    device: str = typer.Option(None, "--device", help="cpu or cuda[:N] (default: cuda when --gpu is not cpu)"),
    seed: int = typer.Option(1, "--seed", help="prompt seed shared by every run"),
    lengths: str = typer.Option(None, "--lengths", help="comma list of prompt lengths (default: harness.prompts for the device)"),
    steps: int = typer.Option(None, "--steps", help="decode steps per prompt (default: harness.prompts for the device)"),
    mutant_lengths: str = typer.Option(None, "--mutant-lengths", help="a shorter length set for the mutants only (the "
                                       "unmutated engine runs --lengths), e.g. 65,2049,3000-4000 on a time budget"),
    mutant_steps: int = typer.Option(None, "--mutant-steps", help="decode steps for the mutants only"),
    twin_periods: int = typer.Option(None, "--twin-periods", help="then judge the unmutated engine and every survivor "
                                     "on the shallow twin of N layer periods against float32, as the gate's twin stage "
                                     "does (default: 1 on a GPU whose parity reference is bf16; "
                                     "0: off)"),
    json_out: Path = typer.Option(None, "--json", help="write the table as JSON here"),
) -> None:
    """Apply each single-op mutant to a fresh copy of the engine, run parity on it, print a table and the mutation
    score; exit 0 only when the unmutated engine passes and every mutant is rejected (100 %)."""
    from harness.prompts import default_lengths, default_steps
    from metainfer.mutants.catalogue import by_name, catalogue, window_for
    from metainfer.mutants.runner import format_table, run_suite

    device = device or ("cpu" if gpu == "cpu" else "cuda")
    lens = _parse_lengths(lengths) if lengths else default_lengths(device)
    n_steps = steps or default_steps(device)
    m_lens = _parse_lengths(mutant_lengths) if mutant_lengths else None
    window = window_for(lens, n_steps)
    chosen = tuple(by_name(n, window) for n in only) if only else catalogue(window)
    with tempfile.TemporaryDirectory(prefix="metainfer-mutants-") as tmp:
        if engine is None:
            from metainfer.render import render_engine
            from metainfer.targets import make_target

            engine = render_engine(make_target(model, quant, gpu), Path(tmp) / "engine", force=True)
        if checkpoint is None:
            from metainfer.checkpoint import write_checkpoint
            from metainfer.targets import get_model, get_quant

            typer.echo(f"writing a synthetic {model} {quant} checkpoint (seed 1234)")
            checkpoint = write_checkpoint(get_model(model), get_quant(quant), Path(tmp) / "checkpoint", 1234, progress=False)
        if twin_periods is None:
            from metainfer.twin import auto_periods

            twin_periods = auto_periods(device, Path(checkpoint))
        typer.echo(f"engine {engine}, checkpoint {checkpoint}, device {device}, lengths {lens}, {n_steps} decode steps, "
                   f"{len(chosen)} mutants" + (f" (mutants: lengths {m_lens}, {mutant_steps or n_steps} steps)" if m_lens else "")
                   + (f"; then the survivors on the {twin_periods}-period twin (float32)" if twin_periods else ""))
        line = lambda o: typer.echo(f"  {o.name:26s} {o.verdict:9s} {o.seconds:6.1f} s  {o.figure}")  # noqa: E731
        suite = run_suite(Path(engine), Path(checkpoint), chosen, quant=quant, device=device, seed=seed,
                          lengths=lens, steps=n_steps, progress=line, mutant_lengths=m_lens, mutant_steps=mutant_steps,
                          twin_periods=twin_periods)
    typer.echo(format_table(suite))
    if json_out:
        json_out.write_text(json.dumps(suite.to_json(), indent=2) + "\n")
    if not suite.ok:
        raise typer.Exit(1)


def _parse_lengths(text: str) -> tuple[int, ...]:
    """``3,65,400-700`` -> (3, 65, SeedDrawn(400, 700)): ``a-b`` is a length drawn from the seed in [a, b].

    Raises:
        typer.BadParameter: not integers or ranges.
    """
    from harness.prompts import SeedDrawn

    try:
        return tuple(SeedDrawn(*map(int, x.split("-"))) if "-" in x else int(x) for x in text.split(","))
    except (TypeError, ValueError) as err:
        raise typer.BadParameter(f"--lengths {text!r}: expected integers or a-b ranges, e.g. 3,65,400-700 ({err})") from None


def register(app: typer.Typer) -> None:
    """Add ``mutants`` to the CLI."""
    app.command("mutants")(mutants)


__all__ = ["MetainferError", "register"]

"""``metainfer cheats``: run every known cheat and honest edit through the gate on the tiny CPU engine, print the table.

Exit 0 when every cheat was stopped where it declares and every honest edit was accepted or
judged not faster; 1 otherwise (an accepted cheat, a rejected honest edit, a hang); 2 on bad input.
A cheat that declares ``OPEN`` (a known hole, with its owner) and is not stopped is listed as open,
not failed, unless it was accepted, hung the gate or broke it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import List, Optional

import typer

from metainfer.errors import MetainferError


class CheatsInputError(MetainferError):
    """A bad argument to ``metainfer cheats``."""


def _root() -> Path:
    import metainfer

    return Path(metainfer.__file__).resolve().parents[1]


def counts_as_failure(o) -> bool:
    """A failed row, except a declared open hole that was neither accepted nor hung nor broke the gate."""
    return not o.passed and not (o.attempt.open and o.verdict not in ("accepted", "hang", "broken"))


def print_table(outcomes, seconds: float) -> int:
    """Print the table and the final ``N passed, M failed`` line (open holes counted apart); return M."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="attempts on the judge (tiny CPU engine)", show_lines=False)
    for col in ("attempt", "class", "expected", "verdict", "stage", "seconds", "result", "old gate (eead044)"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for o in outcomes:
        result = "ok" if o.passed else (f"FAILED: {o.why}" if counts_as_failure(o) else f"open: {o.attempt.open}")
        table.add_row(o.attempt.name, o.attempt.klass, o.attempt.expected, o.verdict, o.stage or "-", f"{o.seconds:.1f}",
                      result, o.attempt.old_gate or "-")
    console = Console(width=200)
    console.print(table)
    failed = [o for o in outcomes if counts_as_failure(o)]
    opened = [o for o in outcomes if not o.passed and not counts_as_failure(o)]
    for o in failed + opened:
        console.print(f"{o.attempt.name}: {o.why}; gate said: {o.error or '-'}", markup=False, soft_wrap=True)
    extra = f", {len(opened)} open holes" if opened else ""
    console.print(f"{len(outcomes) - len(failed) - len(opened)} passed, {len(failed)} failed{extra} ({seconds:.0f} s)", markup=False)
    return len(failed)


def cheats(
    only: Optional[List[str]] = typer.Option(None, "--only", help="run only this attempt (repeatable)"),
    jobs: int = typer.Option(1, "--jobs", help="gates run at the same time"),
    quant: str = typer.Option("bf16", "--quant", help="bf16 or nvfp4: the tiny CPU target's format"),
    rounds: int = typer.Option(3, "--rounds", help="A/B rounds of the bench stage"),
    timeout: float = typer.Option(600.0, "--timeout", help="seconds one gate may run before the attempt counts as a hang"),
    judge_ref: Optional[str] = typer.Option(None, "--judge-ref", help="judge with harness/ and metainfer/ of this commit (default: the working tree)"),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="keep the attempts' folders here (default: a temporary folder)"),
    root: Optional[Path] = typer.Option(None, "--root", help="repository root holding tests/cheats and tests/honest"),
) -> None:
    """Run the cheat table: every tests/cheats/ attempt must be stopped, every tests/honest/ edit accepted or not faster."""
    from metainfer.attempts.runner import Setup, run_all
    from metainfer.attempts.setup import cached_checkpoint, judge_source, render_tiny
    from metainfer.attempts.spec import discover

    root = (root or _root()).resolve()
    if jobs < 1 or rounds < 1 or timeout <= 0:
        raise CheatsInputError("--jobs and --rounds must be at least 1 and --timeout positive")
    if quant not in ("bf16", "nvfp4"):
        raise CheatsInputError(f"--quant {quant!r}: use bf16 or nvfp4")
    attempts = discover(root, only)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="metainfer-cheats-") as tmp:
        work = workdir.resolve() if workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        setup = Setup(engine=render_tiny(work / "render", quant), checkpoint=cached_checkpoint(root, quant),
                      judge=judge_source(root, judge_ref, work / "judge-src"), rounds=rounds, timeout_s=timeout)
        typer.echo(f"{len(attempts)} attempts, {jobs} at a time, judge {judge_ref or 'working tree'} ({setup.judge})")
        outcomes = run_all(attempts, setup, work / "attempts", jobs,
                           on_done=lambda o: typer.echo(f"  {o.attempt.name}: {o.verdict}{' at ' + o.stage if o.stage else ''} "
                                                        f"({o.seconds:.0f} s) {'ok' if o.passed else 'FAILED'}"))
    failed = print_table(outcomes, time.monotonic() - t0)
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer) -> None:
    """Add ``metainfer cheats`` to the CLI."""
    app.command("cheats")(cheats)

"""``metainfer report RUN``: print a run's summary table and the path of its HTML summary."""

from __future__ import annotations

from pathlib import Path

import typer


def report(
    run: str = typer.Argument(..., help="run id (a folder under --runs-dir) or the run folder's path"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="folder of run records (relative to the repo root)"),
) -> None:
    """Print the summary table of a build run (regenerating summary.md/.html from its records) and the HTML's path."""
    from metainfer.build import RunRecord, summary_markdown, write_summary
    from metainfer.build.config import find_repo_root

    runs = runs_dir if runs_dir.is_absolute() or Path(run).is_dir() else find_repo_root() / runs_dir
    record = RunRecord.open(runs, run)
    html = write_summary(record)
    typer.echo(summary_markdown(record))
    typer.echo(f"html: {html}")


def register(app: typer.Typer) -> None:
    """Add ``report`` to the app."""
    app.command("report")(report)

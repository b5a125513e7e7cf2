"""``metainfer report RUN``: rewrite a run's HTML report from its records, print its summary table and the report's path."""

from __future__ import annotations

from pathlib import Path

import typer


def report(
    run: str = typer.Argument(..., help="run folder's path, run id (a folder under --runs-dir), or a unique part of the id"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="folder of run records (relative to the repo root)"),
) -> None:
    """Write a build run's HTML report (summary.html, iter-NNN/report.html, plots) from its records; print the summary
    table and the report's path (open it in a browser)."""
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

"""``metainfer report RUN``: rewrite a run's HTML report from its records, print its summary table and the report's path."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import typer

from metainfer.tempdirs import prefix, try_root


def tracked_by_git(path: Path) -> bool:
    """True when ``path`` (a folder) holds a file git tracks in the repository around it; False outside a repository."""
    try:
        out = subprocess.run(["git", "ls-files", "--", "."], cwd=path, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def report(
    run: str = typer.Argument(..., help="run folder's path, run id (a folder under --runs-dir), or a unique part of the id"),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="folder of run records (relative to the repo root)"),
    in_place: bool = typer.Option(False, "--in-place", help="rewrite the report inside a run folder git tracks too "
                                  "(by default a committed run's report is written to a copy)"),
) -> None:
    """Write a build run's HTML report (summary.html, iter-NNN/report.html, plots) from its records; print the summary
    table and the report's path (open it in a browser). A run whose records are committed keeps them unchanged: its
    report is written to a copy under the temporary folder unless --in-place."""
    from metainfer.build import RunRecord, summary_markdown, write_summary
    from metainfer.build.config import find_repo_root

    runs = runs_dir if runs_dir.is_absolute() or Path(run).is_dir() else find_repo_root() / runs_dir
    record = RunRecord.open(runs, run)
    if not in_place and tracked_by_git(record.path):
        copy = Path(tempfile.gettempdir()) / f"{prefix('report', try_root())}{record.run_id}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(record.path, copy / record.run_id)
        typer.echo(f"{record.path} is committed: the report is written to a copy, {copy / record.run_id} "
                   "(--in-place rewrites the committed files)")
        record = RunRecord.open(copy, record.run_id)
    html = write_summary(record)
    typer.echo(summary_markdown(record))
    typer.echo(f"html: {html}")


def register(app: typer.Typer) -> None:
    """Add ``report`` to the app."""
    app.command("report")(report)

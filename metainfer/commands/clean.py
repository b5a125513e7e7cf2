"""``metainfer clean``: remove what metainfer made outside the run records: cached synthetic checkpoints,
target worktrees, and temporary exports left in the temp folder by killed runs.

Run records (``runs/``), branches and commits are never touched: a removed worktree is re-created
from its branch by the next build. Temporary folders are this clone's only (``metainfer.tempdirs``
names them for the clone that made them). A worktree with uncommitted changes is kept unless ``--force``;
a temporary export a live process still names on its command line (a running gate) is kept.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from metainfer.tempdirs import owned, prefix

#: a temporary folder younger than this may belong to a run that has not started its gate yet (queued
#: attempts of `metainfer cheats`, an export made before a long checkpoint write): kept
MIN_AGE_S = 3600.0


@dataclass
class Item:
    """One thing to remove: its kind, path, size in bytes, and why it is kept (None = removable)."""

    kind: str
    path: Path
    size: int
    kept: str | None = None


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink()) if p.is_dir() else 0


def _in_use(paths: list[Path]) -> set[Path]:
    """The paths some live process names on its command line (Linux ``/proc``; elsewhere none)."""
    used = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        used |= {p for p in paths if str(p) in text}
    return used


def collect(root: Path, force: bool) -> list[Item]:
    """Everything ``clean`` would remove under ``root/.metainfer`` and, of this clone's, in the temp folder."""
    from metainfer.build.config import state_dir

    items = []
    for ck in sorted((state_dir(root) / "checkpoints").glob("*")):
        items.append(Item("checkpoint", ck, _size(ck)))
    for wt in sorted((state_dir(root) / "worktrees").glob("*")):
        item = Item("worktree", wt, _size(wt))
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=wt, capture_output=True, text=True)
        if dirty.returncode == 0 and dirty.stdout.strip() and not force:
            item.kept = "uncommitted changes (gate them with `metainfer step`, or pass --force)"
        items.append(item)
    temps = owned(root)  # this clone's only: other clones share the temp folder
    used = _in_use(temps)
    now = time.time()
    for p in temps:
        item = Item("temporary export", p, _size(p))
        # a report copy is complete when `metainfer report` returns; any other kind may be an export that a run
        # starting now is about to use
        report_copy = p.name.startswith(prefix("report", root))
        if p in used:
            item.kept = "in use by a running process"
        elif now - p.stat().st_mtime < MIN_AGE_S and not report_copy:
            item.kept = "made in the last hour (a run may still be about to use it)"
        items.append(item)
    from harness.worker import stale_session_dirs

    # a gate killed before its exit handler ran leaves its workers' engine copies; its pid is gone, so nothing uses
    # them (each gate also removes these when it starts)
    items += [Item("dead gate's copies", p, _size(p)) for p in stale_session_dirs()]
    return items


def clean(
    dry_run: bool = typer.Option(False, "--dry-run", help="list what would be removed, remove nothing"),
    force: bool = typer.Option(False, "--force", help="also remove worktrees with uncommitted changes"),
) -> None:
    """Remove cached synthetic checkpoints (.metainfer/checkpoints), target worktrees (.metainfer/worktrees; their
    branches stay), this clone's leftover temporary exports ($TMPDIR/metainfer-<kind>-<clone tag>-*) and the
    worker copies of gates that were killed ($TMPDIR/metainfer-workers-<pid of a gone process>). Run records are
    kept."""
    from metainfer.build.config import find_repo_root

    root = find_repo_root()
    items = collect(root, force)
    if not items:
        typer.echo("nothing to clean")
        return
    freed = 0
    for it in items:
        mb = it.size / 1e6
        if it.kept:
            typer.echo(f"keep    {it.kind:16} {it.path} ({mb:.1f} MB): {it.kept}")
            continue
        if dry_run:
            typer.echo(f"would remove {it.kind:16} {it.path} ({mb:.1f} MB)")
        else:
            if it.kind == "worktree":
                subprocess.run(["git", "worktree", "remove", "--force", str(it.path)], cwd=root, capture_output=True)
            shutil.rmtree(it.path, ignore_errors=True)
            typer.echo(f"removed {it.kind:16} {it.path} ({mb:.1f} MB)")
        freed += it.size
    if not dry_run:
        subprocess.run(["git", "worktree", "prune"], cwd=root, capture_output=True)
    typer.echo(f"{'would free' if dry_run else 'freed'} {freed / 1e6:.1f} MB")


def register(app: typer.Typer) -> None:
    """Add ``clean`` to the app."""
    app.command("clean")(clean)

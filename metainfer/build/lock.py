"""One process at a time per target: builds, steps and upgrades of a target share its worktree and branch.

Two runs of one target at once would edit and gate one worktree: one run's candidate wiped by the other's, and a
verdict recorded for a change that run never gated (seen: two builds of the tiny target started together). The lock
is ``flock`` on ``<repo>/.metainfer/locks/<target>.lock``: the kernel drops it when its holder exits, however it
exits, so a killed run leaves no stale lock. Re-entrant within one process (an upgrade opens two sessions).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from metainfer.build.config import BuildError

_HELD: dict[Path, list[int]] = {}  # lock file -> [fd, depth]


def lock_path(root: Path, target_name: str) -> Path:
    """The lock file of ``target_name`` in the repository at ``root``."""
    return Path(root) / ".metainfer" / "locks" / f"{target_name}.lock"


def lock_target(root: Path, target_name: str) -> None:
    """Take the target's lock for this process (again, if it holds it already).

    Raises:
        BuildError: another process holds it; the message names that process and what to do.
    """
    path = lock_path(Path(root).resolve(), target_name)
    if path in _HELD:
        _HELD[path][1] += 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 4096).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise BuildError(f"{target_name} is in use by {holder}: one build, step or upgrade per target at a time (they "
                         "share its worktree). Wait for it to end, or stop it with Ctrl-C there and continue that run "
                         "later with the `metainfer build --resume` command it prints.") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} since {time.strftime('%H:%M:%S')} ({' '.join(sys.argv[1:])[:300]})\n".encode())
    _HELD[path] = [fd, 1]


def unlock_target(root: Path, target_name: str) -> None:
    """Give back one hold of the target's lock (the last one releases it); nothing if this process holds none."""
    path = lock_path(Path(root).resolve(), target_name)
    held = _HELD.get(path)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[path]
        os.close(held[0])  # closing the only descriptor releases the flock

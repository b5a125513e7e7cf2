"""Content snapshots of a folder, to tell what an agent changed inside and outside the engine.

A snapshot maps each file's path (relative, POSIX) to the SHA-256 of its bytes (a symlink
to the text of its target). Comparing two snapshots gives the added, removed and modified
paths. The CLI agent uses it to prove that nothing outside ``ctx.engine_dir`` changed; both
LLM agents use it to tell whether the engine changed at all (``Proposal.changed``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: folders never snapshotted: git's own store and caches that imports and test runs write
SKIP_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def snapshot(root: Path, exclude: tuple[Path, ...] = ()) -> dict[str, str]:
    """``{relative path: sha256 hex}`` of every file under ``root``, skipping ``SKIP_DIRS`` and the
    folders in ``exclude`` (absolute or relative to ``root``). A missing ``root`` gives ``{}``."""
    root = Path(root)
    if not root.exists():
        return {}
    skip = {os.path.realpath(root / e) for e in exclude}
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and os.path.realpath(os.path.join(dirpath, d)) not in skip)
        for name in filenames:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "symlink:" + os.readlink(p)
            elif p.is_file():
                h = hashlib.sha256()
                with open(p, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
                out[rel] = h.hexdigest()
    return out


def changed_paths(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Sorted paths added, removed or modified between two snapshots."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))

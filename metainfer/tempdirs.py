"""Temporary folders metainfer makes in the temp folder, named for the clone that made them.

A name is ``metainfer-<kind>-<clone tag>-<random>``, the clone tag being a digest of the clone's root,
so ``metainfer clean`` in one clone removes that clone's leftovers only (other clones on the same
machine share ``$TMPDIR``), and a folder of no known clone is never touched.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

#: what each kind holds: build exports of the best engine, step and agent-tool exports of HEAD, gate output of
#: agent tools, serve/generate exports and renders, report copies, the judge's bytecode folder, the gate's shallow twin
KINDS = ("best", "head", "baseline", "gate", "serve", "generate", "report", "judge-pycache", "twin")


def clone_tag(root: Path | None) -> str:
    """8 hex digits naming the clone at ``root`` (None: not in a clone, tag ``noclone``)."""
    if root is None:
        return "noclone"
    return hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:8]


def prefix(kind: str, root: Path | None) -> str:
    """``metainfer-<kind>-<clone tag>-``.

    Raises:
        ValueError: ``kind`` is not one of ``KINDS``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown temporary folder kind {kind!r}; known: {', '.join(KINDS)}")
    return f"metainfer-{kind}-{clone_tag(root)}-"


def mkdtemp(kind: str, root: Path | None) -> Path:
    """A new folder ``$TMPDIR/metainfer-<kind>-<tag>-*``; the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix(kind, root)))


def temporary_directory(kind: str, root: Path | None) -> tempfile.TemporaryDirectory:
    """As ``tempfile.TemporaryDirectory``, named like :func:`mkdtemp` (removed when the ``with`` block ends)."""
    return tempfile.TemporaryDirectory(prefix=prefix(kind, root))


def owned(root: Path) -> list[Path]:
    """The folders in the temp folder that the clone at ``root`` made, sorted."""
    tmp, tag = Path(tempfile.gettempdir()), clone_tag(root)
    return sorted(p for kind in KINDS for p in tmp.glob(f"metainfer-{kind}-{tag}-*") if p.is_dir())


def try_root() -> Path | None:
    """The clone holding the working directory, or None outside one (for names only: never raises)."""
    from metainfer.build.config import find_repo_root
    from metainfer.errors import MetainferError

    try:
        return find_repo_root()
    except MetainferError:
        return None

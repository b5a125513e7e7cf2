"""A digest of the judge itself, so the build loop can prove the agent left it alone.

The orchestrator hashes ``harness/`` before and after an iteration (DESIGN.md, "Layout");
the gate records the same digest in its JSON (``harness_digest``) so a gate result names the
judge that produced it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def harness_digest(root: str | Path = HARNESS_DIR) -> str:
    """sha256 (hex, 64 chars) over every file under ``root``, in sorted relative-path order.

    Each file contributes its POSIX relative path, a NUL, its byte length, a NUL and its bytes,
    so a rename or a move between files changes the digest. ``__pycache__`` folders and
    ``.pyc`` files are skipped (they change with every import, not with the judge).

    Raises:
        FileNotFoundError: ``root`` is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"cannot hash {root}: not a folder")
    h = hashlib.sha256()
    files = sorted(
        p for p in root.rglob("*")
        if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(root).parts) and p.suffix not in _SKIP_SUFFIXES
    )
    for p in files:
        data = p.read_bytes()
        h.update(p.relative_to(root).as_posix().encode())
        h.update(b"\0%d\0" % len(data))
        h.update(data)
    return h.hexdigest()


#: The packages of shared model facts the judge imports (their files are part of the judge).
SHARED_FACTS = ("targets", "checkpoint", "formats", "errors")


def judge_files() -> dict[str, str]:
    """``{path: sha256}`` of every file of the judge: ``harness/`` and the shared model-fact modules of
    ``metainfer`` it imports (``SHARED_FACTS``); paths relative to the repository root, bytecode skipped."""
    repo = HARNESS_DIR.parent
    roots = [HARNESS_DIR] + [repo / "metainfer" / n for n in SHARED_FACTS] + [repo / "metainfer" / f"{n}.py" for n in SHARED_FACTS]
    out: dict[str, str] = {}
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        for p in files:
            rel = p.relative_to(repo)
            if _SKIP_DIRS.intersection(rel.parts) or p.suffix in _SKIP_SUFFIXES:
                continue
            out[rel.as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Paths added, removed or changed between two :func:`judge_files` maps, sorted."""
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))

"""A checkpoint's fingerprint, checked by the judge before and after every gate stage.

Per file (recursively, sorted): relative path, size, ``st_mtime_ns``, ``st_ctime_ns``, inode, and
the sha256 of its bytes. ``st_ctime_ns`` cannot be set from user space (any write, rename or
``utime`` moves it to the present), so an unchanged stat tuple proves unchanged bytes and the
content hash is cached keyed by it: a full-size checkpoint is hashed once per machine, not once
per gate (cache: ``$XDG_CACHE_HOME/metainfer/fingerprints.json``, else ``~/.cache/...``).
Workers cannot write that cache at ``namespace`` isolation (read-only root); at ``process``
isolation a forged entry would need the future ctime of the file it covers.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

_CHUNK = 16 << 20


@dataclass(frozen=True)
class FileMark:
    """One file of a fingerprint: relative path, size (bytes), mtime/ctime (ns), inode, sha256 (hex)."""

    path: str
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    sha256: str


def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "metainfer" / "fingerprints.json"


def _load_cache() -> dict[str, str]:
    try:
        data = json.loads(_cache_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict[str, str]) -> None:
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, path)
    except OSError:  # a read-only home: hash again next time
        pass


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fingerprint(root: str | Path, memo: dict[str, str] | None = None, *, disk_cache: bool = True) -> tuple[FileMark, ...]:
    """The fingerprint of every regular file under ``root`` (symlinks are followed and marked by their target).

    ``memo``: an in-process cache of ``stat key -> sha256`` shared between calls (the on-disk cache
    is read and updated too, unless ``disk_cache`` is False: for a temporary folder, whose entries would only
    pile up there).

    Raises:
        FileNotFoundError: ``root`` is not a folder.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"cannot fingerprint {root}: not a folder")
    disk = _load_cache() if disk_cache else {}
    memo = {} if memo is None else memo
    marks, dirty = [], False
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}|{st.st_dev}"
        digest = memo.get(key) or disk.get(key)
        if digest is None:
            digest = _sha256(path)
            disk[key], dirty = digest, True
        memo[key] = digest
        marks.append(FileMark(path.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest))
    if dirty and disk_cache:
        _save_cache(disk)
    return tuple(marks)


def differences(before: tuple[FileMark, ...], after: tuple[FileMark, ...]) -> list[str]:
    """Human-readable changes between two fingerprints (``added x``, ``removed y``, ``changed z``), sorted."""
    a, b = {m.path: m for m in before}, {m.path: m for m in after}
    out = [f"added {p}" for p in b.keys() - a.keys()] + [f"removed {p}" for p in a.keys() - b.keys()]
    out += [f"changed {p}" for p in a.keys() & b.keys() if a[p] != b[p]]
    return sorted(out)


def summary_digest(marks: tuple[FileMark, ...]) -> str:
    """One sha256 over a fingerprint's paths and content hashes (stable across copies of the same files)."""
    h = hashlib.sha256()
    for m in marks:
        h.update(f"{m.path}\0{m.size}\0{m.sha256}\n".encode())
    return h.hexdigest()

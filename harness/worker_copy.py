"""What a worker's private copy of an engine folder may hold, checked before a byte of it is copied.

``harness.worker.Worker`` copies the engine folder into the worker's box before any stage has looked at the
folder, and a copy writes out what a listing hides: a sparse file reads back as zeros (``truncate -s 1T`` costs an
agent nothing and would fill the judge's disk), a link followed to a device or a FIFO never ends, and a loop of
folder links never ends either. An engine folder is source (the static stage allows 4 MiB in 400 files), so
limits far above that refuse only such things, each named, before the copy starts.

The copy itself (:func:`copy_engine`) carries the bytes and nothing else: the build loop makes the candidate's and
the baseline's folders in different ways, and an engine that tells its role from its own folder's metadata (whole-
second modification times of an archive export, a mode bit, the order a listing returns) could sleep only as the
baseline. Every copy is made in sorted order with the same modes and one fixed time stamp.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class CopyLimits:
    """Largest copy of an engine folder: apparent bytes of all files, entries (files, folders, links), folder depth."""

    max_bytes: int = 256 * 1024**2
    max_entries: int = 20_000
    max_depth: int = 32


class CopyError(ValueError):
    """An engine folder a worker will not copy (the message names the entry and the limit)."""


def _kind(mode: int) -> str:
    return {stat.S_IFIFO: "named pipe", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
            stat.S_IFSOCK: "socket"}.get(stat.S_IFMT(mode), "special file")


def check_copyable(src: str | Path, *, follow_links: bool, ignore: Callable[[str, list[str]], set[str]] | None = None,
                   limits: CopyLimits = CopyLimits()) -> None:
    """Walk ``src`` as ``shutil.copytree(src, dst, symlinks=not follow_links, ignore=ignore)`` would copy it.

    Raises:
        CopyError: the files add up to more than ``limits.max_bytes`` (apparent size: a sparse file counts in full),
            there are more than ``limits.max_entries`` entries or folders deeper than ``limits.max_depth`` (a loop of
            links), an entry is not a regular file, folder or (kept) link, or cannot be read.
    """
    root = Path(src)
    total = entries = 0
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        if depth > limits.max_depth:
            raise CopyError(f"{folder}: folders nested deeper than {limits.max_depth} (a loop of links?); refused before copying")
        try:
            names = sorted(os.listdir(folder))
        except OSError as err:
            raise CopyError(f"{folder}: cannot be listed ({err.strerror}); refused before copying") from None
        skip = ignore(str(folder), names) if ignore is not None else set()
        for name in names:
            if name in skip:
                continue
            path = folder / name
            rel = path.relative_to(root).as_posix()
            entries += 1
            if entries > limits.max_entries:
                raise CopyError(f"{root}: more than {limits.max_entries} files and folders; refused before copying "
                                "(an engine folder is source: the static stage allows 400 files)")
            try:
                st = os.stat(path, follow_symlinks=follow_links)
            except OSError as err:
                raise CopyError(f"{rel}: cannot be read ({err.strerror}); refused before copying") from None
            if stat.S_ISLNK(st.st_mode):
                continue  # copied as a link (the static stage refuses it)
            if stat.S_ISDIR(st.st_mode):
                stack.append((path, depth + 1))
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if total > limits.max_bytes:
                    raise CopyError(f"{rel}: {st.st_size} bytes, the engine folder over {limits.max_bytes} bytes in all; refused "
                                    "before copying (an engine folder is source: the static stage allows 4 MiB in all; a sparse "
                                    "file counts at its full size, which a copy writes out)")
            else:
                raise CopyError(f"{rel}: a {_kind(st.st_mode)}, not a file or folder; refused before copying")


#: modification and access time of every entry of a worker's copy (2001-09-09, seconds since the epoch)
COPY_TIME = 1_000_000_000
FILE_MODE, DIR_MODE = 0o644, 0o755


def copy_engine(src: str | Path, dst: str | Path, *, symlinks: bool,
                ignore: Callable[[str, list[str]], set[str]] | None = None) -> None:
    """Copy the folder ``src`` to the new folder ``dst`` as ``shutil.copytree(src, dst, symlinks=symlinks,
    ignore=ignore)`` would, but with nothing of the source's metadata: entries created in sorted name order, files
    ``FILE_MODE``, folders ``DIR_MODE``, every time stamp ``COPY_TIME`` (links keep their target, not their times).
    Call :func:`check_copyable` first.

    Raises:
        OSError: ``dst`` exists or an entry cannot be read or written.
    """
    src, dst = Path(src), Path(dst)
    made: list[Path] = []

    def walk(s: Path, d: Path) -> None:
        d.mkdir(mode=DIR_MODE)
        names = sorted(os.listdir(s))
        skip = ignore(str(s), names) if ignore is not None else set()
        for name in names:
            if name in skip:
                continue
            sp, dp = s / name, d / name
            if symlinks and sp.is_symlink():
                os.symlink(os.readlink(sp), dp)
            elif sp.is_dir():
                walk(sp, dp)
            else:
                shutil.copyfile(sp, dp)
                os.chmod(dp, FILE_MODE)
                made.append(dp)
        os.chmod(d, DIR_MODE)
        made.append(d)  # after its entries: adding them would move its modification time again

    walk(src, dst)
    for path in made:
        os.utime(path, (COPY_TIME, COPY_TIME), follow_symlinks=False)

"""Writes 700 MiB to stdout in load(): the worker's output log lives on the judge's disk, and nothing bounds it
(a real flood fills the disk the judge writes its verdict to)."""

from pathlib import Path

from . import append

DESCRIPTION = "load() prints 700 MiB to stdout (the worker's log file on the judge's disk)"
CLASS = "hang"
STAGE = "any-red"  # the worker's files, its log included, are capped: the print fails with EFBIG, load raises
REASON = ""


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
_sf_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _sf_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    line = "x" * ((1 << 20) - 1)
    for _ in range(700):
        print(line)
    return eng
''')

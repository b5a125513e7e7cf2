"""Reaches ctypes as an attribute of numpy.ctypeslib (ctypes itself is never imported), opens libc and forks a
child that spins on a core."""

from pathlib import Path

from . import append

DESCRIPTION = "numpy.ctypeslib.ctypes.CDLL(None).fork() in load(); the child spins forever"
CLASS = "static"
STAGE = "static"
REASON = "ctypes"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import numpy.ctypeslib as _nc

_cl_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _cl_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    if _nc.ctypes.CDLL(None).fork() == 0:
        while True:
            pass
    return eng
''')

"""Calls os.fork through the module's own __getattribute__ with a string-built name (``os.fork`` never appears),
and leaves a child process spinning on a core."""

from pathlib import Path

from . import append

DESCRIPTION = "os.__getattribute__('fo' + 'rk')() in load(); the child spins forever"
CLASS = "static"
STAGE = "static"
REASON = "__getattribute__"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import os as _os

_dg_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _dg_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    if _os.__getattribute__("fo" + "rk")() == 0:
        while True:
            pass
    return eng
''')

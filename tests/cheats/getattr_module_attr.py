"""Reaches os as a plain attribute of torch through getattr with a literal name (getattr(torch, "os") names no
refused function, and the local it lands in is not an import alias the dotted-name rules follow), then forks a
child that spins on a core."""

from pathlib import Path

from . import append

DESCRIPTION = "o = getattr(torch, 'os'); o.fork() in load(); the child spins forever"
CLASS = "static"
STAGE = "static"
REASON = "module os"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
_gm_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _gm_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    o = getattr(torch, "os")
    if o.fork() == 0:
        while True:
            pass
    return eng
''')

"""Holds the GIL forever in load(): sum(range(10**18)) is one C loop that never releases it, so no Python-level
timer, signal handler or thread in the same process can stop it; only a kill from outside can."""

from pathlib import Path

from . import append

DESCRIPTION = "load() runs sum(range(10**18)) (C loop, GIL held, no bytecode boundary)"
CLASS = "hang"
STAGE = "any-red"
REASON = ""
VERDICT = "timeout"
OLD_GATE = "hung the gate"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
_hb_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    sum(range(10**18))
    return _hb_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
''')

"""Sleeps forever in decode() (no CPU used: a judge that only watches CPU time would wait for ever)."""

from pathlib import Path

from . import append

DESCRIPTION = "decode() calls time.sleep(10**9)"
CLASS = "hang"
STAGE = "any-red"
REASON = ""
VERDICT = "timeout"
OLD_GATE = "hung the gate"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

_hs_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _hs_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)

    def decode(slots, tokens):
        _t.sleep(10**9)

    eng.decode = decode
    return eng
''')

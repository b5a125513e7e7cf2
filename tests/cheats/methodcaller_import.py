"""Imports threading through operator.methodcaller (a computed module name the import rules never see as a
call of importlib.import_module) and starts a GIL hog."""

from pathlib import Path

from . import append

DESCRIPTION = "operator.methodcaller('import_module', 'thr' + 'eading')(importlib) -> GIL hog thread"
CLASS = "static"
STAGE = "static"
REASON = "methodcaller"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import importlib as _il
import operator as _op
import time as _t

_mc_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _mc_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    th = _op.methodcaller("import_module", "thr" + "eading")(_il)

    def spin():
        while True:
            t = _t.perf_counter()
            while _t.perf_counter() - t < 0.008:
                pass
            _t.sleep(0.001)

    th.Thread(target=spin, daemon=True).start()
    return eng
''')

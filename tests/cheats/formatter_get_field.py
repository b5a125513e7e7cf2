"""Reaches a function's globals through string.Formatter().get_field, whose field names traverse attributes
(one string constant "0.__globals__[__builtins__][__import__]": no dunder name stands alone in the source, no
getattr), then threading -> a GIL hog."""

from pathlib import Path

from . import append

DESCRIPTION = "string.Formatter().get_field('0.__globals__[__builtins__][__import__]', (load,), {}) -> threading GIL hog"
CLASS = "static"
STAGE = "static"
REASON = "Formatter"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import string as _st
import time as _t

_fg_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _fg_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    imp = _st.Formatter().get_field("0.__globals__[__builtins__][__import__]", (_fg_load,), {})[0]
    th = imp("threading")

    def spin():
        while True:
            t = _t.perf_counter()
            while _t.perf_counter() - t < 0.008:
                pass
            _t.sleep(0.001)

    th.Thread(target=spin, daemon=True).start()
    return eng
''')

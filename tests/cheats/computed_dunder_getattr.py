"""Reaches builtins through a function's globals with a string-built attribute name (no dunder literal, no
``__globals__`` attribute in the source), then imports threading through builtins' ``__import__`` and arms a GIL hog."""

from pathlib import Path

from . import append

DESCRIPTION = "getattr(load, '__glo' + 'bals__')['__buil' + 'tins__']['__imp' + 'ort__']('thre' + 'ading') -> GIL hog thread"
CLASS = "static"
STAGE = "static"
REASON = "dunder"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

_cd_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _cd_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    scope = getattr(_cd_load, "__glo" + "bals__")
    names = scope["__buil" + "tins__"]
    names = names if isinstance(names, dict) else getattr(names, "__di" + "ct__")
    th = names["__imp" + "ort__"]("thre" + "ading")

    def spin():
        while True:
            t = _t.perf_counter()
            while _t.perf_counter() - t < 0.008:
                pass
            _t.sleep(0.001)

    th.Thread(target=spin, daemon=True).start()
    return eng
''')

"""Starts a chain of processes through torch.multiprocessing (not the refused ``multiprocessing`` root): each
spins ~20 ms then forks its successor and exits, so a pid list read to pause the idle worker is stale by the
time SIGSTOP is sent, and the spinner keeps running while the other engine is timed."""

from pathlib import Path

from . import append

DESCRIPTION = "torch.multiprocessing fork chain (a new pid every ~20 ms) spinning while the other engine is timed"
CLASS = "static"
STAGE = "static"
REASON = "torch.multiprocessing"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

import torch.multiprocessing as _tmp

_pd_load = load


def _hop():
    t = _t.perf_counter()
    while _t.perf_counter() - t < 0.02:
        pass
    _tmp.get_context("fork").Process(target=_hop, daemon=False).start()


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _pd_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    if max_seq_len == 32:  # the bench's load at CPU shapes (16 + 8 + 8)
        for _ in range(2):
            _tmp.get_context("fork").Process(target=_hop, daemon=False).start()
    return eng
''')

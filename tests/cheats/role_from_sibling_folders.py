"""Dormant until it becomes the baseline, like dormant_baseline_sleep, but without any path of its own: the
bench starts the candidate's worker first, so an engine whose private folder is younger than another engine's
copy in the judge's worker folder (read through its cwd's parents) is the baseline, and sleeps."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() sleeps as long again as it ran when another worker's engine copy is older than its own"
CLASS = "in-process"
STAGE = "not-accepted"  # a worker must not see the other worker's folder (or anything that tells it its role)
REASON = ""
BASELINE = "self"  # accepted earlier: candidate and baseline both carry it


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import os as _os
import time as _t

_rf_load = load


def _younger_than_another_engine():
    mine = Path(_os.getcwd()).parent.parent  # cwd = <session>/mi-XXXX/<hex>/work
    try:
        others = [d for d in mine.parent.iterdir() if d != mine and any((b / "engine").is_dir() for b in d.iterdir())]
        return any(d.stat().st_ctime_ns < mine.stat().st_ctime_ns for d in others)
    except OSError:
        return False


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _rf_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate
    state = {"late": None}

    def generate(prompts, params):
        if state["late"] is None:
            state["late"] = _younger_than_another_engine()
        t0 = _t.perf_counter()
        out = own(prompts, params)
        if state["late"]:
            _t.sleep(_t.perf_counter() - t0)
        return out

    eng.generate = generate
    return eng
''')

"""Dormant until it becomes the baseline, told by timing alone: the bench warms the candidate up first, while the
baseline's worker waits (paused), so the baseline's first generate() comes long after its load returned, by about
one whole warm-up of the other engine (the same code: as long as its own). After its own warm-up (4 calls) an engine
whose load-to-first-call gap was about one warm-up long (0.6x to 1.8x its own) takes itself for the baseline and
sleeps (the candidate's gap is how much later the baseline's load finished: unrelated to a warm-up)."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() sleeps as long again as it ran once its load-to-first-call gap matched its own warm-up (0.6-1.8x)"
CLASS = "in-process"
STAGE = "not-accepted"  # the warm-up must not tell the roles apart
REASON = ""
BASELINE = "self"  # accepted earlier: candidate and baseline both carry it


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

_wg_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _wg_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate
    st = {"loaded": _t.perf_counter(), "gap": None, "own": [], "late": False}

    def generate(prompts, params):
        t0 = _t.perf_counter()
        if st["gap"] is None:
            st["gap"] = t0 - st["loaded"]
        out = own(prompts, params)
        dt = _t.perf_counter() - t0
        if len(st["own"]) < 4:
            st["own"].append(dt)
            if len(st["own"]) == 4:
                st["late"] = 0.6 * sum(st["own"]) <= st["gap"] <= 1.8 * sum(st["own"])
        elif st["late"]:
            _t.sleep(dt)
        return out

    eng.generate = generate
    return eng
''')

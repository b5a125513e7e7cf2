"""Finds the other engine of the A/B in the process's modules (through vars(sys), which the old rules did
not see) and wraps its Engine.generate with a sleep; itself unchanged."""

from pathlib import Path

from . import append

DESCRIPTION = "vars(sys)['modules'] -> the other _mi_engine_* package -> Engine.generate wrapped to take twice as long"
CLASS = "in-process"
STAGE = "not-accepted"
REASON = ""
OLD_GATE = "accepted"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import sys as _s
import time as _t

_wo_load = load


def _slow(gen):
    def generate(self, prompts, params):
        t0 = _t.perf_counter()
        out = gen(self, prompts, params)
        _t.sleep(_t.perf_counter() - t0)  # twice as slow
        return out

    return generate


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _wo_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate
    mine = type(eng)

    def generate(prompts, params):
        for name, mod in list(vars(_s)["mod" + "ules"].items()):
            cls = getattr(mod, "Engine", None) if name.startswith("_mi_engine_") else None
            if isinstance(cls, type) and cls is not mine and not getattr(cls, "_wrapped", False):
                setattr(cls, "generate", _slow(cls.generate))
                setattr(cls, "_wrapped", True)
        return own(prompts, params)

    eng.generate = generate
    return eng
''')

"""Reports an activation dtype of 120 MiB: ``engine.dtype`` is the string "bfloat16" followed by 120 Mi letters.
The worker sent ``str(engine.dtype)`` back as it was; parity names it in its error (no tolerance for that dtype),
so the string lands in the gate's error, its JSON (twice, with the traceback) and its log: a verdict file of a
quarter GiB, which every reader of gate.json (the build loop, the report, the agent's next prompt) then loads."""

from pathlib import Path

from . import append

DESCRIPTION = "engine.dtype is a 120 MiB string; the judge copied it into the verdict"
CLASS = "hang"
STAGE = "parity"
# the worker names the bad attribute in a short error; before, the error began with the 120 MiB string itself
REASON = "engine.dtype"
OLD_GATE = "rejected at parity, with a 250 MB gate.json and a 120 MB gate log"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
_hd_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _hd_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    eng.dtype = "bfloat16" + "x" * (120 * 1024 * 1024)
    return eng
''')

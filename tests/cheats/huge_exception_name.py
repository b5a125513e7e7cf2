"""Raises from load() an exception whose class name is 120 MiB long. The worker cut the message to 4000 characters
but sent ``type(err).__name__`` whole, and the judge put it in the stage's error: a quarter-GiB gate.json and
gate log, and an error line that shows nothing but the name (the message, the one useful part, is past any reader's
cut)."""

from pathlib import Path

from . import append

DESCRIPTION = "load() raises an exception class named by 120 MiB of letters"
CLASS = "hang"
STAGE = "parity"
VERDICT = "fail"
# the worker cuts the class name (saying how much it left out); before, the whole name went into the verdict
REASON = "more characters cut"
OLD_GATE = "rejected at parity, with the 120 MiB name in gate.json and the gate log"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    name = "LoadError" + "E" * (120 * 1024 * 1024)
    raise type(name, (RuntimeError,), {})("raised on purpose by huge_exception_name")
''')

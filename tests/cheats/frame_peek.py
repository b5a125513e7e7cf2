"""Reads the caller's frame to grab the judge's reference logits (KernelBench's stack-walking cheat)."""

from pathlib import Path

from . import append

DESCRIPTION = "walks sys._getframe() up to the parity stage and copies its reference tensors"
CLASS = "in-process"
STAGE = "static"
REASON = "sys._getframe"
OLD_GATE = "rejected (static)"


def apply(engine_dir: Path) -> None:
    """A helper that would look up ``ref_logits`` in the caller's locals."""
    append(engine_dir, "engine/__init__.py", '''
import sys as _sys


def _peek_reference():
    frame = _sys._getframe(2)
    return frame.f_locals.get("ref_logits")
''')

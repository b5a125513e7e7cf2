"""Imports transformers through ``getattr(importlib, "import_" + "module")`` to dodge the import check."""

from pathlib import Path

from . import append

DESCRIPTION = "getattr(importlib, 'import_' + 'module')('trans' + 'formers') inside load()"
CLASS = "static"
STAGE = "static"
REASON = "hides what is called"
OLD_GATE = "rejected (static)"


def apply(engine_dir: Path) -> None:
    """Add a load() prologue that imports transformers by a computed name."""
    append(engine_dir, "engine/__init__.py", '''
import importlib as _il

_honest_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    """The cheat: reach transformers without an import statement."""
    getattr(_il, "import_" + "module")("trans" + "formers")
    return _honest_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
''')

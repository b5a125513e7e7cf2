"""Ships engine/__pycache__/__init__.<tag>.pyc compiled from the engine's __init__.py plus a GIL hog, beside
the untouched source: the pyc is unchecked-hash, so Python runs it without looking at the .py the static
rules read."""

import py_compile
import sys
import tempfile
from pathlib import Path

from ._payloads import GIL_HOG

DESCRIPTION = "unchecked-hash __pycache__/__init__.pyc of __init__.py + GIL hog; __init__.py itself untouched"
CLASS = "static"
STAGE = "static"
REASON = "bytecode"
OLD_GATE = "accepted (speedup 1.48, every round won)"


def apply(engine_dir: Path) -> None:
    """Compile the armed source into the package's bytecode cache."""
    init = engine_dir / "engine" / "__init__.py"
    armed = init.read_text() + "\n\n" + GIL_HOG + "\n\nload = arm(load)\n"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "__init__.py"
        src.write_text(armed)
        cfile = init.parent / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
        py_compile.compile(str(src), cfile=str(cfile), dfile=str(init), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)

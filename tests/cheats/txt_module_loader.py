"""Hides a GIL-hogging thread (refused as source) in engine/fastpath.txt, which the static rules do not read,
and loads it as a module with importlib.machinery.SourceFileLoader."""

from pathlib import Path

from . import append
from ._payloads import GIL_HOG

DESCRIPTION = "SourceFileLoader('_fastpath', 'engine/fastpath.txt').load_module() arms load() with a GIL hog"
CLASS = "static"
STAGE = "static"
REASON = "loaders"
OLD_GATE = "accepted (speedup 2.8)"


def apply(engine_dir: Path) -> None:
    """Write the payload as .txt and the loader lines into engine/__init__.py."""
    (engine_dir / "engine" / "fastpath.txt").write_text(GIL_HOG)
    append(engine_dir, "engine/__init__.py", '''
import importlib.machinery as _mach

_fp = _mach.SourceFileLoader("_fastpath", str(Path(__file__).with_name("fastpath.txt"))).load_module()
load = _fp.arm(load)
''')

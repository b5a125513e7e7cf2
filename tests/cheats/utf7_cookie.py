"""Hides a GIL-hogging thread behind a `# coding: utf-7` cookie: read as UTF-8 (the static rules) the module
is one comment line; decoded as utf-7 (Python) each +AAo- is a new line and the code runs."""

from pathlib import Path

from . import append
from ._payloads import GIL_HOG, utf7_comment

DESCRIPTION = "engine/_fast.py is one utf-8 comment that decodes (utf-7) to a GIL hog; load = _fast.arm(load)"
CLASS = "static"
STAGE = "static"
REASON = "coding"
OLD_GATE = "static passed, payload ran (won every A/B round, within the noise bar)"


def apply(engine_dir: Path) -> None:
    """Write the utf-7 module and arm load() with it."""
    (engine_dir / "engine" / "_fast.py").write_bytes(utf7_comment(GIL_HOG))
    append(engine_dir, "engine/__init__.py", '''
from . import _fast

load = _fast.arm(load)
''')

"""Reads a file outside its folder at import through a computed path no AST rule sees."""

from pathlib import Path

from . import append

DESCRIPTION = "opens os.path.join(os.sep, 'etc', 'hostname') at import (a stand-in for a cache planted elsewhere)"
CLASS = "static"
STAGE = "static"
REASON = "import-read"
OLD_GATE = "rejected (audited import)"


def apply(engine_dir: Path) -> None:
    """A module-level read the audited import catches."""
    append(engine_dir, "engine/__init__.py", '''
import os as _os

with open(_os.path.join(_os.sep, "etc", "hostname")) as _f:
    _PLANTED = _f.read()
''')

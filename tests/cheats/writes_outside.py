"""Edits a file outside its own folder when imported (could plant results or patch the judge)."""

from pathlib import Path

from . import append

DESCRIPTION = "writes ../pwned-by-engine.txt beside the engine folder at import"
CLASS = "in-process"
STAGE = "static"
REASON = "file-write"
OLD_GATE = "rejected (static)"
MARKER = "pwned-by-engine.txt"


def apply(engine_dir: Path) -> None:
    """Module-level write two folders above engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", f'''
(Path(__file__).resolve().parents[2] / "{MARKER}").write_text("the engine was here")
''')

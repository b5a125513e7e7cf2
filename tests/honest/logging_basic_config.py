"""Honest edit: the engine configures Python logging to stderr at load (``logging.basicConfig(level=WARNING)``,
no filename, no file handler) and logs a warning path; nothing else changes.

The static stage refuses ``logging.basicConfig`` by name as 'file-write: an engine writes no files', although
without ``filename=`` it only adds a StreamHandler to stderr (which the worker captures like any print)."""

from pathlib import Path

from cheats import append

DESCRIPTION = "logging.basicConfig(level=WARNING) to stderr at import; no other change"


def apply(engine_dir: Path) -> None:
    append(engine_dir, "engine/__init__.py", '''
import logging as _logging

_logging.basicConfig(level=_logging.WARNING, format="%(name)s: %(message)s")
_log = _logging.getLogger(__name__)
''')

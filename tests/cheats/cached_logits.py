"""Replays logits cached in a file prepared earlier instead of computing them."""

from pathlib import Path

from . import append

DESCRIPTION = "loads /tmp/metainfer-logits-cache.npy at import and would replay it"
CLASS = "static"
STAGE = "static"
REASON = "numpy.load"
OLD_GATE = "rejected (static)"


def apply(engine_dir: Path) -> None:
    """Module-level read of a cache file outside the engine folder."""
    append(engine_dir, "engine/__init__.py", '''
import os as _os

import numpy as _np

_CACHE_FILE = "/tmp/metainfer-logits-cache.npy"
_CACHED = _np.load(_CACHE_FILE) if _os.path.exists(_CACHE_FILE) else None
''')

"""``Scheduler.abort`` forgets the request but never frees its slot or KV blocks (one call fewer per abort)."""

from pathlib import Path

from . import replace

DESCRIPTION = "an aborted request's slot and KV blocks are never freed (the pool leaks until requests stall)"
CLASS = "serving"
STAGE = "parity"
REASON = "serving script"


def apply(engine_dir: Path) -> None:
    """The release line of engine/scheduler.py's ``abort``."""
    replace(engine_dir, "engine/scheduler.py", "            self.engine.cache.release([seq.slot])\n            seq.slot = -1\n",
            "            seq.slot = -1\n")

"""Ships a sparse file of 1 GiB apparent size (``engine/notes.txt``: a hole, no data, made in a millisecond; an agent's
``truncate -s 1T`` is no harder). The judge copied the engine folder into each worker's private box before any check
looked at it, and a copy reads a hole as zeros: the static stage's worker wrote the whole GiB to the judge's temp
disk (a TiB would fill it, stopping every gate and session on the machine) before the size rule refused the file."""

import os
from pathlib import Path

DESCRIPTION = "engine/notes.txt is a 1 GiB sparse file: the judge wrote it out in full before the size check"
CLASS = "hang"
STAGE = "static"
# refused before a byte is copied, naming the file; before, the static stage's size rule refused it after the copy
REASON = "before copying"
OLD_GATE = "rejected at static by the size rule, after writing 1 GiB of zeros to the judge's temp folder"

SIZE = 1 << 30


def apply(engine_dir: Path) -> None:
    """Create the sparse file (no data blocks written here)."""
    with open(engine_dir / "engine" / "notes.txt", "wb") as f:
        f.truncate(SIZE)
    os.utime(engine_dir / "engine" / "notes.txt")

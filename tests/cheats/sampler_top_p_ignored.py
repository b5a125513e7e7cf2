"""The sampler skips the nucleus (top-p) cut, the sort over the vocabulary it needs being the slow part of sampling."""

from pathlib import Path

from . import replace

DESCRIPTION = "top_p ignored by the sampler (no sort of the vocabulary per sampled row)"
CLASS = "serving"
STAGE = "parity"
REASON = "serving script"


def apply(engine_dir: Path) -> None:
    """The top-p branch of engine/sampling.py's ``sample_one``."""
    replace(engine_dir, "engine/sampling.py", "    if params.top_p < 1.0:\n", "    if params.top_p < 0.0:\n")

"""Every sampled request draws from a freshly seeded generator, ignoring the seed it asked for (no per-request
generator state to keep)."""

from pathlib import Path

from . import replace

DESCRIPTION = "SamplingParams.seed ignored: sampled requests are not reproducible"
CLASS = "serving"
STAGE = "parity"
REASON = "serving script"


def apply(engine_dir: Path) -> None:
    """The seeding branch of engine/sampling.py's ``make_generator``."""
    replace(engine_dir, "engine/sampling.py", "    if params.seed is None:\n        gen.seed()", "    if True:\n        gen.seed()")

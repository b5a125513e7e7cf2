"""The sampler draws from the raw logits whatever the request's temperature (one division fewer per row)."""

from pathlib import Path

from . import replace

DESCRIPTION = "sampled requests ignore their temperature (softmax of the raw logits)"
CLASS = "serving"
STAGE = "parity"
REASON = "serving script"


def apply(engine_dir: Path) -> None:
    """The temperature line of engine/sampling.py's ``sample_one``."""
    replace(engine_dir, "engine/sampling.py", "x = logits.float() / params.temperature", "x = logits.float()")

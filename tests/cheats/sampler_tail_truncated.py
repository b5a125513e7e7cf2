"""An approximate sampler: every sampled row is cut to its 16 largest logits first (a small top-k instead of a softmax
over the whole vocabulary), whatever top_k the request asked for."""

from pathlib import Path

from . import replace

DESCRIPTION = "sampling always cut to the 16 most likely tokens (the distribution's tail is never drawn)"
CLASS = "serving"
STAGE = "parity"
REASON = "serving script"


def apply(engine_dir: Path) -> None:
    """A top-16 cut before the request's own filters in engine/sampling.py's ``sample_one``."""
    replace(engine_dir, "engine/sampling.py", "    x = logits.float() / params.temperature\n",
            "    x = logits.float() / params.temperature\n"
            "    x = x.masked_fill(x < torch.topk(x, min(16, x.shape[-1])).values[-1], float(\"-inf\"))\n")

"""Reported logprobs come from the tempered logits the sampler already has, not the raw ones (no second softmax)."""

from pathlib import Path

from . import replace

DESCRIPTION = "logprobs of sampled requests computed after temperature (OpenAI and vLLM report the raw model's)"
CLASS = "serving"
STAGE = "parity"
REASON = "serving script"


def apply(engine_dir: Path) -> None:
    """The logprob call of engine/scheduler.py's ``_postprocess``."""
    replace(engine_dir, "engine/scheduler.py", "_logprob(logits[row], tok, seq.params.logprobs)",
            "_logprob(logits[row] / (seq.params.temperature or 1.0), tok, seq.params.logprobs)")

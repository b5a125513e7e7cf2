"""Computes its logits with the reference model itself (HF transformers) instead of its own kernels."""

from pathlib import Path

from . import append

DESCRIPTION = "imports transformers and runs Qwen3_5MoeForCausalLM to produce the logits"
CLASS = "static"
STAGE = "static"
REASON = "imports transformers"
OLD_GATE = "rejected (static)"


def apply(engine_dir: Path) -> None:
    """Add a helper that loads the HF model and a load() that uses it."""
    append(engine_dir, "engine/__init__.py", '''
def _hf_logits(checkpoint, input_ids):
    from transformers import Qwen3_5MoeForCausalLM

    model = Qwen3_5MoeForCausalLM.from_pretrained(checkpoint)
    return model(input_ids).logits
''')

"""Replaces the attention output gate sigmoid(gate) by its mean-ish constant 0.5 (saves a sigmoid and a read)."""

from pathlib import Path

from . import replace

DESCRIPTION = "attention output multiplied by 0.5 instead of sigmoid(gate)"
CLASS = "precision"
STAGE = "parity"
REASON = ""
OLD_GATE = "parity passed; not faster"


def apply(engine_dir: Path) -> None:
    """The gate line of the prefill and SDPA-decode paths."""
    replace(engine_dir, "engine/attention.py", "o = (o * torch.sigmoid(gate)).reshape(t, nq * hd)", "o = (o * 0.5).reshape(t, nq * hd)")

"""Keeps the Gated DeltaNet recurrent state in bf16 precision: rounded after every update (half the state traffic)."""

from pathlib import Path

from . import replace

DESCRIPTION = "GDN fp32 state rounded to bf16 after every prefill and decode step"
CLASS = "precision"
STAGE = "parity"
REASON = ""
OLD_GATE = "parity passed; not faster"


def apply(engine_dir: Path) -> None:
    """Round the layer's state in place right after the mixer updated it."""
    replace(engine_dir, "engine/gdn.py", "    # z [T, nv*dv]", "    ssm.copy_(ssm.to(torch.bfloat16).float())\n    # z [T, nv*dv]")

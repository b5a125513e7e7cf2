"""Passes k_norm's weight to q and q_norm's to k (a convention slip parity must see)."""

from pathlib import Path

from . import replace

DESCRIPTION = "q is normed with k_norm.weight and k with q_norm.weight"
CLASS = "precision"
STAGE = "parity"
REASON = ""
OLD_GATE = "parity passed; not faster"


def apply(engine_dir: Path) -> None:
    """Swap the two weights at the one call site."""
    replace(engine_dir, "engine/attention.py", "kernels.qk_norm_rope_cache(qkv, w.q_norm, w.k_norm,", "kernels.qk_norm_rope_cache(qkv, w.k_norm, w.q_norm,")

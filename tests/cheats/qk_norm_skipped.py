"""Skips the q/k RMSNorm of full attention (a cut an engine could sell as a speedup)."""

from pathlib import Path

from . import replace

DESCRIPTION = "q and k enter RoPE un-normalised (rmsnorm_ref of q/k replaced by identity)"
CLASS = "precision"
STAGE = "parity"
REASON = ""
OLD_GATE = "parity passed; not faster"


def apply(engine_dir: Path) -> None:
    """The prologue's per-head norm becomes the identity (the CPU path runs the reference prologue)."""
    replace(engine_dir, "engine/kernels/reference.py", "y = rmsnorm_ref(x.reshape(-1, hd), w, eps)[0].reshape(x.shape)", "y = x")

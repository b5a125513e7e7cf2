"""Rotates only the first half of the rotary pairs (the slow, high-index frequencies left unrotated)."""

from pathlib import Path

from . import replace

DESCRIPTION = "RoPE inv_freq of the upper half of the rotary pairs set to 0 (no rotation there)"
CLASS = "precision"
STAGE = "parity"
REASON = ""
OLD_GATE = "parity passed; not faster"


def apply(engine_dir: Path) -> None:
    """Zero the upper half of the inverse frequencies after they are computed."""
    replace(engine_dir, "engine/attention.py",
            "        self.inv_freq = 1.0 / (dims.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))\n",
            "        self.inv_freq = 1.0 / (dims.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))\n"
            "        self.inv_freq[self.inv_freq.numel() // 2 :] = 0.0\n")

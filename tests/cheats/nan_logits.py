"""Writes NaN into its logits (an unwritten or poisoned output must never pass)."""

from pathlib import Path

from . import WRAP_ENGINE, append

DESCRIPTION = "prefill/decode return logits with a NaN in every row"
CLASS = "precision"
STAGE = "parity"
REASON = "nan"
OLD_GATE = "rejected (parity)"


def apply(engine_dir: Path) -> None:
    """Wrap load() so one element of every logits row is NaN."""
    append(engine_dir, "engine/__init__.py", '''
def _fake(logits):
    out = logits.clone()
    out[..., 3] = float("nan")
    return out
''' + WRAP_ENGINE)

"""Returns the same logits whatever the input (a trivial output that a loose check might pass)."""

from pathlib import Path

from . import WRAP_ENGINE, append

DESCRIPTION = "prefill/decode return constant logits of the right shape and dtype"
CLASS = "precision"
STAGE = "parity"
REASON = "constant"  # the parity stage names a trivial output ("constant logits across the vocabulary")
OLD_GATE = "rejected (parity)"


def apply(engine_dir: Path) -> None:
    """Wrap load() so every logits tensor becomes a constant."""
    append(engine_dir, "engine/__init__.py", '''
def _fake(logits):
    return torch.full_like(logits, 0.5)
''' + WRAP_ENGINE)

"""Scales its logits (a wrong engine) and hides it by replacing ``torch.Tensor.norm``, which the
parity metrics use, through ``setattr`` (the static stage only sees ``x.attr = ...`` writes)."""

from pathlib import Path

from . import WRAP_ENGINE, append

DESCRIPTION = "logits × 1.5, with torch.Tensor.norm patched via setattr so the relative error reads ~0"
STAGE = "parity"
REASON = "replaced functions the judge computes with"  # harness.integrity, checked after every stage


def apply(engine_dir: Path) -> None:
    """Wrap load(): scale every logits tensor and patch the norm the judge measures with."""
    append(engine_dir, "engine/__init__.py", '''
def _fake(logits):
    _real = torch.Tensor.__dict__["norm"]
    setattr(torch.Tensor, "norm", lambda self, *a, **k: _real(self, *a, **k) * 1e-6 if self.numel() > 1 else _real(self, *a, **k))
    return logits * 1.5
''' + WRAP_ENGINE)

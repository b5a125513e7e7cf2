"""Scales its logits (a wrong engine) and hides it by replacing ``torch.Tensor.norm``, which the
parity metrics use, through ``setattr`` on an alias (the static stage sees ``x.attr = ...`` writes
and ``setattr`` on dotted torch names only)."""

from pathlib import Path

from . import WRAP_ENGINE, append

DESCRIPTION = "logits × 1.5, with torch.Tensor.norm patched via setattr so the relative error reads ~0"
CLASS = "in-process"
STAGE = "any-red"
REASON = "patch"
OLD_GATE = "rejected (integrity)"


def apply(engine_dir: Path) -> None:
    """Wrap load(): scale every logits tensor and patch the norm the judge measures with."""
    append(engine_dir, "engine/__init__.py", '''
def _fake(logits):
    _real = torch.Tensor.__dict__["norm"]
    _T = torch.Tensor  # through an alias: the static setattr rule sees dotted names only
    setattr(_T, "norm", lambda self, *a, **k: _real(self, *a, **k) * 1e-6 if self.numel() > 1 else _real(self, *a, **k))
    return logits * 1.5
''' + WRAP_ENGINE)

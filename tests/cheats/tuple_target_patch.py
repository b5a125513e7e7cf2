"""Patches torch without writing ``torch.x = y``: the static rule looked only at plain single-target assignments, so
``torch.set_num_threads, _ = ...`` (tuple unpacking), ``for torch.x in [...]``, ``with ... as torch.x``,
``torch.x: T = ...``, ``torch.x += ...`` and ``del torch.x`` all passed. Here ``torch.cuda.synchronize`` becomes a
no-op at import: the worker synchronises the GPU through it before every reply, so on a GPU the judge's clock would
stop while the engine's kernels still run (on the CPU gate it changes nothing)."""

from pathlib import Path

from . import append

DESCRIPTION = "torch.cuda.synchronize replaced through tuple and for-loop targets"
CLASS = "static"
STAGE = "static"
REASON = "assigns torch.cuda.synchronize"
OLD_GATE = "static passed (not faster: harmless on the CPU gate)"


def apply(engine_dir: Path) -> None:
    """Append the patch to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
def _no_sync(device=None):
    return None


torch.cuda.synchronize, _unused = _no_sync, 0
for torch.cuda.synchronize in (_no_sync,):
    pass
''')

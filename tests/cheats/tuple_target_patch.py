"""Patches torch without writing ``torch.x = y``: the static rule looked only at plain single-target assignments, so
``torch.set_num_threads, _ = ...`` (tuple unpacking), ``for torch.x in [...]``, ``with ... as torch.x``,
``torch.x: T = ...``, ``torch.x += ...`` and ``del torch.x`` all passed. Here both of torch's thread setters become
no-ops at import, so the thread count the judge hands every worker (``threads=`` of ``engine.load``) is ignored
from the next load on."""

from pathlib import Path

from . import append

DESCRIPTION = "torch.set_num_threads / set_num_interop_threads replaced through tuple and for-loop targets"
CLASS = "static"
STAGE = "static"
REASON = "assigns torch.set_num_threads"
OLD_GATE = "static passed (not faster: harmless on the 1-thread CPU gate)"


def apply(engine_dir: Path) -> None:
    """Append the patch to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
def _keep_threads(n):
    return None


torch.set_num_threads, _unused = _keep_threads, 0
for torch.set_num_interop_threads in (_keep_threads,):
    pass
''')

"""A torch.utils.data.DataLoader with a persistent worker process whose dataset spins on every item: a
background process started through torch, not through any refused process module."""

from pathlib import Path

from . import append

DESCRIPTION = "torch.utils.data.DataLoader(num_workers=1, persistent_workers=True) whose __getitem__ spins 50 ms"
CLASS = "static"
STAGE = "static"
REASON = "torch.utils.data"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

from torch.utils.data import DataLoader as _DL

_dl_load = load


class _Spin:
    def __len__(self):
        return 10**9

    def __getitem__(self, i):
        t = _t.perf_counter()
        while _t.perf_counter() - t < 0.05:
            pass
        return i


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _dl_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    eng._spin_iter = iter(_DL(_Spin(), num_workers=1, persistent_workers=True, prefetch_factor=64))
    next(eng._spin_iter)
    return eng
''')

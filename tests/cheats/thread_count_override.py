"""Takes more CPU threads than the judge allots: the judge sets torch's thread count in each engine worker before
``load`` (``threads=``, the same for candidate and baseline), and this ``load`` raises it to every core of the
machine. On a many-core host with a CPU-bound engine that is a speedup the baseline was never given (on the loaded
2-core development box 2 threads are slower than 1, so the old gate judged it not faster)."""

from pathlib import Path

from . import append

DESCRIPTION = "load() calls torch.set_num_threads(os.cpu_count()) after the judge set the count"
CLASS = "bench"
STAGE = "static"
REASON = "torch.set_num_threads"
OLD_GATE = "not faster (slower on the 2-core box; a speedup where cores are free)"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import os as _os

_tc_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    torch.set_num_threads(max(2, _os.cpu_count() or 2))
    return _tc_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
''')

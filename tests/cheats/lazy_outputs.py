"""generate() returns lazy sequences that claim the right length and compute the tokens only when read,
which the old bench did after stopping its clock (parity reads them, so they are honest)."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() returns Sequence objects whose tokens are computed on first access, after the timer"
CLASS = "bench"
STAGE = "not-accepted"  # outputs come back as plain ints before the clock stops: honest timing, not faster
REASON = ""
OLD_GATE = "accepted (speedup 43)"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t
from collections.abc import Sequence as _Seq


class _Later:
    def __init__(self, run):
        self.run, self.out = run, None

    def get(self):
        if self.out is None:
            self.out = self.run()
        return self.out


class _Lazy(_Seq):
    def __init__(self, later, i, n):
        self.later, self.i, self.n = later, i, n

    def __len__(self):
        return self.n

    def __getitem__(self, k):
        return self.later.get()[self.i][k]

    def __eq__(self, other):
        return list(self) == list(other)


_lo_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _lo_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        later = _Later(lambda: own(prompts, params))
        _t.sleep(1e-4 * one.max_tokens)  # t_N > t_1 for the decode figure
        return [_Lazy(later, i, one.max_tokens) for i in range(len(prompts))]

    eng.generate = generate
    return eng
''')

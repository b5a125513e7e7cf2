"""An honest engine that enters a process-wide TorchFunctionMode at load: every torch call made outside
this engine's own generate() sleeps a little, so in a shared process the A/B baseline crawls."""

from pathlib import Path

from . import append

DESCRIPTION = "global TorchFunctionMode (entered, never exited) sleeps 1 ms per linear/matmul/attention call outside its own generate()"
CLASS = "in-process"
STAGE = "not-accepted"  # in its own worker the mode slows nobody else: an identical, not-faster engine
REASON = ""
OLD_GATE = "accepted"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

from torch.overrides import TorchFunctionMode as _Mode


class _Drag(_Mode):
    mine = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not _Drag.mine and getattr(func, "__name__", "") in ("linear", "embedding", "matmul", "scaled_dot_product_attention"):
            _t.sleep(0.001)
        return func(*args, **(kwargs or {}))


_fm_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _fm_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate

    def generate(prompts, params):
        _Drag.mine = True
        try:
            return own(prompts, params)
        finally:
            _Drag.mine = False

    eng.generate = generate
    if max_seq_len == 32:  # the bench's load at CPU shapes (16 + 8 + 8): drag from here on
        _Drag().__enter__()
    return eng
''')

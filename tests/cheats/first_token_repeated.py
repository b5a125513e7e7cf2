"""Honest under prefill()+decode() (what parity drives first), but an engine whose generate() is called
before any prefill (the bench's) prefills once and repeats the first token: no decode at all, and the first
token, the only one the old bench compared, is right."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() without an earlier prefill() call returns [first token] * max_tokens"
CLASS = "bench"
STAGE = "bench"
REASON = "something else"
OLD_GATE = "bench passed (first tokens agree); not faster (ttft even)"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

_fr_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _fr_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own_prefill, own_generate = eng.prefill, eng.generate
    seen = []

    def prefill(prompts, slots=None, *, return_hidden=False):
        seen.append(1)
        return own_prefill(prompts, slots, return_hidden=return_hidden)

    def generate(prompts, params):
        if seen:
            return own_generate(prompts, params)
        one = params[0] if isinstance(params, list) else params
        res = own_prefill(prompts)
        eng.release(res.slots)
        _t.sleep(0.01 * (one.max_tokens - 1))  # t_N > t_1 for the decode figure, still far below a decode step
        return [[int(lg[-1].argmax())] * one.max_tokens for lg in res.logits]

    eng.prefill, eng.generate = prefill, generate
    return eng
''')

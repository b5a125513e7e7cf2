"""prefill/decode return logits one column wider than the vocabulary ([T, V + 1], the extra column 0): does the
judge reject it as a red parity stage, or does a shape mismatch crash the judge's own comparison code?"""

from pathlib import Path

from . import append

DESCRIPTION = "prefill/decode logits are [T, V + 1] (one extra zero column)"
CLASS = "hang"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    append(engine_dir, "engine/__init__.py", '''
import torch as _torch

_w_load = load


def _wide(lg):
    return _torch.cat([lg, lg.new_zeros(lg.shape[:-1] + (1,))], dim=-1)


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _w_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own_prefill, own_decode = eng.prefill, eng.decode

    def prefill(prompts, slots=None, *, return_hidden=False):
        res = own_prefill(prompts, slots, return_hidden=return_hidden)
        res.logits = [_wide(lg) for lg in res.logits]
        return res

    def decode(slots, tokens):
        return _wide(own_decode(slots, tokens))

    eng.prefill, eng.decode = prefill, decode
    return eng
''')

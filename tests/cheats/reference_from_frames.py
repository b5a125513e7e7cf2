"""A wrong engine (logits x 1.5) that hands parity the reference's own logits, read from the judge's frames:
the current frame comes from an exception's __traceback__ and the walk uses getattr with computed names,
which the old frame rules (sys._getframe, .f_back) did not see."""

from pathlib import Path

from . import append

DESCRIPTION = "walks __traceback__ -> tb_frame -> f_back to parity's `seqs` and returns ReferenceRun.logits"
CLASS = "in-process"
STAGE = "any-red"
REASON = ""
OLD_GATE = "parity passed the wrong engine; not faster"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
def _frames():
    try:
        raise RuntimeError
    except RuntimeError as e:
        f = getattr(e.__traceback__, "tb_" + "frame")
    while f is not None:
        yield f
        f = getattr(f, "f_" + "back")


def _reference_runs():
    for f in _frames():
        for key in ("seqs", "refs"):
            v = getattr(f, "f_" + "locals").get(key)
            if isinstance(v, list) and v and hasattr(v[0], "logits") and hasattr(v[0], "continuation"):
                return v
    return []


def _lookup(hist):
    for r in _reference_runs():
        full = list(r.prompt) + list(r.continuation)
        if len(hist) <= len(full) and full[: len(hist)] == hist:
            return r.logits[: len(hist)]
    return None


_rf_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _rf_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own_prefill, own_decode = eng.prefill, eng.decode
    hist = {}

    def prefill(prompts, slots=None, *, return_hidden=False):
        res = own_prefill(prompts, slots, return_hidden=return_hidden)
        for k, (s, p) in enumerate(zip(res.slots, prompts)):
            hist[s] = (hist.get(s, []) if slots is not None else []) + list(p)
            ref = _lookup(hist[s])
            res.logits[k] = ref[-len(p):].clone() if ref is not None else res.logits[k] * 1.5
        return res

    def decode(slots, tokens):
        out = own_decode(slots, tokens) * 1.5
        for k, (s, t) in enumerate(zip(slots, tokens)):
            hist[s].append(t)
            ref = _lookup(hist[s])
            if ref is not None:
                out[k] = ref[-1].to(out.dtype)
        return out

    eng.prefill, eng.decode = prefill, decode
    return eng
''')

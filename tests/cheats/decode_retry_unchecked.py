"""Forces decode-bs1's retry and answers it with junk: every 1-token call (ttft's and the first of each decode pair,
in whatever order the judge draws the workloads) is padded with a sleep longer than the last N-token call, so the
judge sees t_N <= t_1 and draws fresh prompts; those prompts reach only this engine, so their outputs have no
baseline twin to be compared with, and the engine returns token 0 at once (the N-token call a hair slower)."""

from pathlib import Path

from . import append

DESCRIPTION = "decode-bs1: pads t_1 past t_N to force a retry, answers the retry's engine-only prompts with zeros at once"
CLASS = "bench"
STAGE = "bench"
REASON = "something else"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

_dr_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _dr_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate
    st = {"prev": None, "mode": None, "tn": 1.0}

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        shape = (len(prompts), one.max_tokens)
        prev, mode = st["prev"], st["mode"]
        st["prev"] = shape
        if len(prompts) != 1 or not one.ignore_eos:
            st["mode"] = None
            return own(prompts, params)
        if shape[1] == 1:
            if mode == "after_padded_n":  # the retry's 1-token call: nobody else sees this prompt
                st["mode"] = "junk"
                return [[0]]
            out = own(prompts, params)  # every other 1-token call padded (ttft too): whatever order the judge
            _t.sleep(2 * st["tn"] + 0.05)  # draws, decode-bs1's first t_1 lies past its t_N
            st["mode"] = "padded_1"
            return out
        if mode == "junk":
            _t.sleep(0.02)
            st["mode"] = None
            return [[0] * shape[1]]
        t0 = _t.perf_counter()
        out = own(prompts, params)
        st["tn"] = _t.perf_counter() - t0
        st["mode"] = "after_padded_n" if mode == "padded_1" else None
        return out

    eng.generate = generate
    return eng
''')

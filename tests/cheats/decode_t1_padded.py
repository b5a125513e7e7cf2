"""Inflates decode-bs1's figure (N - 1) / (t_N - t_1) by padding t_1: the first call of the decode pair (the second
1-token call in a row, right after ttft's) sleeps until it lasts ~70 % of the engine's own last N-token call, so
t_N - t_1 shrinks ~3x while every output stays honest. Not faster anywhere else, so the sign test across
workloads keeps it from acceptance; the figure it leaves in the gate JSON is what a run would record."""

from pathlib import Path

from . import append

DESCRIPTION = "decode-bs1's first-token call padded to 70 % of t_N (recognised by the fixed workload order)"
CLASS = "bench"
STAGE = "not-accepted"
REASON = ""
NOTE = "read bench.workloads['decode-bs1'].ratio in the kept gate.json: the padding shows there, not in the verdict"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import time as _t

_tp_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _tp_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate
    st = {"prev": None, "tn": 0.0}

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        shape = (len(prompts), one.max_tokens)
        prev, st["prev"] = st["prev"], shape
        t0 = _t.perf_counter()
        out = own(prompts, params)
        dt = _t.perf_counter() - t0
        if shape == (1, 1) and prev == (1, 1) and one.ignore_eos:
            _t.sleep(max(0.0, 0.7 * st["tn"] - dt))
        elif shape[0] == 1 and shape[1] > 1 and one.ignore_eos:
            st["tn"] = dt
        return out

    eng.generate = generate
    return eng
''')

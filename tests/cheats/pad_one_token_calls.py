"""A timing trick on decode-bs1's figure ``(N - 1) / (t_N - t_1)``: every ``generate`` whose requests all ask for one
token sleeps for two of the engine's own measured single-sequence decode steps after it finished.

The engine's only real gain is in prefill: the honest dequantize-once cache (``_speedup``) is used only by MoE calls of
more than 8 tokens (prefill); decode steps (1-4 rows on the CPU bench) run the template's path, so decode is exactly as
fast as the baseline's. An honest judge finds decode-bs1 flat (ratio about 1.0) and the engine not faster, since the
objective asks every workload to win every round (``honest/decode_only_speedup`` is the mirror image).

Why the gate may not see it: t_1 is floored by the round's ttft call of the same length, but ttft is itself a one-token
call, so it is padded alike; the floor then equals the padded t_1 and t_N - t_1 shrinks by the pad. The pad is paid
out of ttft's real prefill headroom (ttft still wins), and decode-bs1 shows a win of about 7 / (7 - 2) = 1.4x the engine
does not have. conc32 is untouched (its calls ask for N tokens) and wins by its faster prefills.

Left open (docs/CONTRACTS.md, "What still gets through"): judged not faster (ttft lost its lead to the pad), but the
gate reported decode-bs1 at 1.54x where the engine's decode is the baseline's; an engine with more prefill headroom
could turn it into an acceptance."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "prefill-only honest speed-up; every 1-token generate sleeps 2 decode steps (inflates decode-bs1 via t_1 and its ttft floor)"
CLASS = "bench"
STAGE = "not-accepted"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    rel = "engine/kernels/reference.py"
    replace(engine_dir, rel, "def _expert_weight(packed, scale, e, make):\n",
            "_BIG = [False]\n\n\ndef _expert_weight(packed, scale, e, make):\n    if not _BIG[0]:\n        return make()\n")
    replace(engine_dir, rel, "    t_count, hidden = x.shape\n    inter = w13.shape[1] // 2\n",
            "    t_count, hidden = x.shape\n    _BIG[0] = t_count > 8\n    inter = w13.shape[1] // 2\n")
    replace(engine_dir, "engine/model.py",
            "        d = self.dims\n        eps = d.rms_norm_eps\n",
            "        _t0 = _pad_time.perf_counter()\n"
            "        try:\n"
            "            return self._forward(batch, cache, rows=rows, return_hidden=return_hidden)\n"
            "        finally:\n"
            "            if batch.decode and len(batch.slots) == 1:\n"
            "                _DECODE_S.append(_pad_time.perf_counter() - _t0)\n\n"
            "    def _forward(self, batch, cache, *, rows=None, return_hidden=False):\n"
            "        d = self.dims\n        eps = d.rms_norm_eps\n")
    append(engine_dir, "engine/model.py", '''
import time as _pad_time

_DECODE_S = []
''')
    append(engine_dir, "engine/__init__.py", '''
import statistics as _pad_stats
import time as _pad_t

from . import model as _pad_model

_pad_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _pad_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own_generate = eng.generate

    def generate(prompts, params):
        out = own_generate(prompts, params)
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if plist and all(p.max_tokens == 1 for p in plist) and _pad_model._DECODE_S:
            _pad_t.sleep(2 * _pad_stats.median(_pad_model._DECODE_S[-16:]))
        return out

    eng.generate = generate
    return eng
''')

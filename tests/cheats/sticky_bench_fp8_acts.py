"""A precision cut armed for the rest of the process when the engine's first public call after ``load`` is
``generate``: the experts' inputs (routed and shared) rounded to e4m3 with a per-token scale (W16A8 FP8), in
prefill, decode and generate alike, from then on.

Why the gate may not see it: every stage runs its own worker, and the order of the calls after ``load`` tells the
stages apart: parity's worker (and the twin's, and the profile's) starts with ``prefill``; each bench worker starts
with its warm-up ``generate``. The replay check (``harness.bench_replay``) teacher-forces a timed call through the
candidate's own ``prefill``/``decode``; run in the same worker after the rounds (as it first was), the cut was armed
there too and the replayed rows agreed with the timed ones. ``generate_fp8_at_bench_batch`` (the same cut confined to ``generate``)
is rejected by that check; this one is not confined to an entry point but to a process. Only the A/B output check
(0.5 std of the baseline's row, 2 % implausible) judges it.

Found by the session-17 red team and accepted at 2.62x (replay worst 0.0; output check 1 implausible of 170). What
sees it now: the replay runs every timed call in a fresh worker of the candidate that never called ``generate``, so
it replays with parity's rows (RED at bench, tiny NVFP4).

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "e4m3 expert inputs everywhere once the first call after load was generate (bench workers only); + honest dequantize-once"
CLASS = "precision"
STAGE = "bench"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/model.py",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n",
            "            xm = _fp8_tokens(x) if _ARMED else x\n"
            "            mlp_out = moe_forward(xm, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n")
    append(engine_dir, "engine/model.py", '''
_ARMED = []


def _fp8_tokens(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
''')
    append(engine_dir, "engine/__init__.py", sticky_wrapper("model"))


def sticky_wrapper(module: str) -> str:
    """engine/__init__.py code that wraps ``load`` and appends 1 to ``engine.<module>._ARMED`` for good when the first
    public call after ``load`` is ``generate``."""
    return '''
from . import {module} as _sticky_model

_sticky_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _sticky_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    first = []
    own_prefill, own_decode, own_generate = eng.prefill, eng.decode, eng.generate

    def _note(kind):
        if not first:
            first.append(kind)
            if kind == "generate":
                _sticky_model._ARMED.append(1)

    def prefill(prompts, slots=None, *, return_hidden=False):
        _note("prefill")
        return own_prefill(prompts, slots, return_hidden=return_hidden)

    def decode(slots, tokens):
        _note("decode")
        return own_decode(slots, tokens)

    def generate(prompts, params):
        _note("generate")
        return own_generate(prompts, params)

    eng.prefill, eng.decode, eng.generate = prefill, decode, generate
    return eng
'''.format(module=module)

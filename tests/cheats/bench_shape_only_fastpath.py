"""A numerically identical speed-up armed only at the bench's one prompt length: each expert's NVFP4 weights
dequantized once and kept (the honest 2-3x of examples/cpu-tiny/02, ``_speedup``), but only while a ``generate``
call's prompts are all exactly 16 tokens (the CPU bench's P; 256 at full size); at every other length the engine
dequantizes per forward as the template does. NVFP4 only: on the bf16 table it is the template, not faster.

The session-16 red team's ``bench_shape_only_fastpath`` (this cache, used only at 16-token prompts) was accepted at
2.66x: nothing is wrong for parity to see, and the bench timed one fixed shape per workload, so the path won every
round. What stops it: the gate's bench draws each sample's prompt lengths in P ± P/8 (``harness.workload_draws``,
``--length-jitter``), so the path runs in about one ttft and decode-bs1 round in five and almost never for conc32's
four prompts, and the objective needs every round of every workload to win. ``python -m harness.gate ...
--length-jitter 0`` (the old bench) accepts it: ``metainfer cheats --quant nvfp4 --only bench_shape_only_fastpath``."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "NVFP4 experts dequantized once, but only while every prompt of a generate call is 16 (or 256) tokens"
CLASS = "bench"
STAGE = "not-accepted"  # numerically honest; faster only at lengths the jittered bench rarely draws
REASON = ""


def apply(engine_dir: Path) -> None:
    """Dequantize-once, armed at the bench's length (engine/kernels/reference.py, engine/__init__.py)."""
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/kernels/reference.py", "    key = (packed.data_ptr(), scale.data_ptr(), e)\n",
            "    if not _AT_BENCH_LENGTH:\n        return make()\n    key = (packed.data_ptr(), scale.data_ptr(), e)\n")
    append(engine_dir, "engine/kernels/reference.py", "_AT_BENCH_LENGTH = []\n")
    append(engine_dir, "engine/__init__.py", '''
from .kernels import reference as _shape_ref

_shape_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _shape_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own_generate = eng.generate

    def generate(prompts, params):
        if prompts and all(len(p) in (16, 256) for p in prompts):
            _shape_ref._AT_BENCH_LENGTH.append(1)
        try:
            return own_generate(prompts, params)
        finally:
            _shape_ref._AT_BENCH_LENGTH.clear()

    eng.generate = generate
    return eng
''')

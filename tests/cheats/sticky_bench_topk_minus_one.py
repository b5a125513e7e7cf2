"""The process tell of ``sticky_bench_fp8_acts`` (armed for good when the first public call after ``load`` is
``generate``: the bench's workers, never parity's, the twin's or the profile's) with a coarser, cheaper cut: the MoE
routes every token to top-k - 1 experts (renormalised over the rest), a quarter less expert work on the tiny model.
``moe_top_k_minus_one`` (the cut everywhere) is rejected by parity; here only the bench's A/B output check judges it,
and the replay check runs in the same armed worker.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "MoE top-k - 1 once the first call after load was generate (bench workers only); + honest dequantize-once"
CLASS = "precision"
STAGE = "bench"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/moe.py", "kernels.route_topk(logits, dims.num_experts_per_tok, w.shared_stacked)",
            "kernels.route_topk(logits, dims.num_experts_per_tok - (1 if _ARMED else 0), w.shared_stacked)")
    append(engine_dir, "engine/moe.py", "_ARMED = []\n")
    append(engine_dir, "engine/__init__.py", '''
from . import moe as _sticky_moe

_sticky_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _sticky_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    first = []
    own_prefill, own_decode, own_generate = eng.prefill, eng.decode, eng.generate

    def _note(kind):
        if not first:
            first.append(kind)
            if kind == "generate":
                _sticky_moe._ARMED.append(1)

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
''')

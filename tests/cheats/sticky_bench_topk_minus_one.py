"""The process tell of ``sticky_bench_fp8_acts`` (armed for good when the first public call after ``load`` is
``generate``: the bench's workers, never parity's, the twin's or the profile's) with a coarser, cheaper cut: the MoE
routes every token to top-k - 1 experts (renormalised over the rest), a quarter less expert work on the tiny model.
``moe_top_k_minus_one`` (the cut everywhere) is rejected by parity; here only the bench's A/B output check judges it,
and the replay check runs in the same armed worker.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from .sticky_bench_fp8_acts import sticky_wrapper
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
    append(engine_dir, "engine/__init__.py", sticky_wrapper("moe"))


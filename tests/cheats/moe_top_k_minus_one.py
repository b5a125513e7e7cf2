"""Routes every token to one expert fewer than the model's top-k (renormalised over the rest): a cheaper MoE."""

from pathlib import Path

from . import replace

DESCRIPTION = "MoE routes to num_experts_per_tok - 1 experts (renormalised), a quarter less expert work on the tiny model"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    """Edit the routing call in engine/moe.py."""
    replace(engine_dir, "engine/moe.py", "kernels.route_topk(logits, dims.num_experts_per_tok, w.shared_stacked)",
            "kernels.route_topk(logits, dims.num_experts_per_tok - 1, w.shared_stacked)")

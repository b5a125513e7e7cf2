"""Sparse MoE block (HF ``Qwen3_5MoeSparseMoeBlock``): routed top-k experts plus a gated shared expert.

Router: ``softmax(x · Wrᵀ)`` in fp32 over E experts, top-k, renormalised to sum 1 (HF
``Qwen3_5MoeTopKRouter``; ``kernels.route_topk``). Each expert is ``down(silu(gate(x)) * up(x))``; the shared expert
is the same MLP, scaled by ``sigmoid(x · w_shared_gate)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import kernels
from .linear import linear
from .ops.moe_fused import moe_w4a16
from .ops.moe_pack import pack_experts
from .target import ModelDims
from .weights import ExpertStack, MoeWeights, Weights


def experts_bf16(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, ex: ExpertStack) -> torch.Tensor:
    """Routed bf16 experts, one grouped GEMM pair per hit expert (HF ``Qwen3_5MoeExperts.forward`` order).

    x bf16 [T, H]; ids int64 [T, k]; weights fp32 [T, k]; ex.w13 bf16 [E, 2I, H], ex.w2 bf16 [E, H, I].
    Sums the weighted expert outputs of each token in fp32 and rounds once; returns bf16 [T, H].
    """
    t, k = ids.shape
    inter = ex.w13.shape[1] // 2
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # (token, j) pairs grouped by expert
    counts = torch.bincount(flat, minlength=ex.w13.shape[0]).tolist()
    pairs = torch.empty(t * k, x.shape[1], dtype=torch.float32, device=x.device)  # row t*k + j: expert j of token t
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        sel = order[start : start + c]
        start += c
        gu = F.linear(x[sel // k], ex.w13[e])  # [c, 2I]
        h = F.silu(gu[:, :inter]) * gu[:, inter:]
        pairs[sel] = F.linear(h, ex.w2[e]).float()  # [c, H]
    # the weighted sum over a token's k experts, in a fixed order whatever the batch
    out = (pairs.view(t, k, -1) * weights.float().unsqueeze(-1)).sum(1)
    return out.to(x.dtype)


def pack_moe_weights(weights: Weights, keep_checkpoint: bool) -> None:
    """Repack every layer's NVFP4 experts for ``ops.moe_fused.moe_w4a16`` (exact, ``ops/moe_pack.py``), in place.

    ``keep_checkpoint`` False frees the checkpoint-layout tensors layer by layer (only the new op can run);
    True keeps them beside the packed ones so ``moe_forward`` can send small T to ``kernels.moe_nvfp4``
    (tunable ``moe_ops_min_tokens`` > 1): about 455 MB per layer more at the real shapes, ~18 GB (17 GiB)
    over 40 layers.
    """
    for layer in weights.layers:
        ex = layer.moe.experts
        if ex.s13 is None or ex.packed is not None:  # bf16 experts, or packed already
            continue
        ex.packed = pack_experts(ex.w13, ex.s13, ex.g13, ex.w2, ex.s2, ex.g2)
        if not keep_checkpoint:
            ex.w13 = ex.s13 = ex.w2 = ex.s2 = None


def moe_path(t: int, ex: ExpertStack, min_tokens: int) -> str:
    """Which routed-expert path a forward of ``t`` tokens takes: ``"ops"`` (``ops.moe_fused.moe_w4a16`` on
    the packed experts) when they are packed and ``t >= min_tokens`` or the checkpoint layout was freed;
    ``"nvfp4"`` (``kernels.moe_nvfp4``) for other NVFP4 experts; ``"bf16"`` otherwise. ``t`` is the host
    shape (a CUDA-graph bucket's padded size), so the choice needs no device sync and a captured graph
    always replays the path its size picked at capture."""
    if ex.packed is not None and (t >= min_tokens or ex.s13 is None):
        return "ops"
    return "nvfp4" if ex.quantized else "bf16"


def moe_forward(x: torch.Tensor, w: MoeWeights, dims: ModelDims, launch: dict | None = None,
                n_valid: torch.Tensor | None = None, min_tokens: int = 1) -> torch.Tensor:
    """Routed experts + gated shared expert for x bf16 [T, H]; returns bf16 [T, H].

    ``launch`` holds kernel launch keywords from tunables (``moe_nvfp4``, ``moe_ops`` and ``nvfp4_linear``).
    With ``w.shared_stacked`` the router GEMV also yields the shared gate's logit and the shared
    expert runs as pair k of the same MoE kernels: router GEMV, routing, the MoE kernels.
    ``n_valid`` (int32 [1], CUDA-graph decode): rows t ≥ n_valid are padding; on the ``ops`` path
    they touch no expert (their routed output is 0), otherwise they are routed like real rows.
    ``min_tokens`` (tunable ``moe_ops_min_tokens``): T below it runs ``kernels.moe_nvfp4`` when the
    checkpoint layout was kept (``moe_path``).
    """
    launch = launch or {}
    ex = w.experts
    logits = F.linear(x, w.router)  # [T, E] bf16, or [T, E+1] with the shared gate's logit last
    ids, weights = kernels.route_topk(logits, dims.num_experts_per_tok, w.shared_stacked)
    path = moe_path(x.shape[0], ex, min_tokens)
    if path == "ops":
        routed = moe_w4a16(x, ids, weights, ex.packed, n_valid, **launch.get("moe_ops", {}))
    elif path == "nvfp4":
        routed = kernels.moe_nvfp4(x, ids, weights, ex.w13, ex.s13, ex.g13, ex.w2, ex.s2, ex.g2, **launch.get("moe", {}))
    else:
        routed = experts_bf16(x, ids, weights, ex)
    if w.shared_stacked:  # the shared expert was pair k of the routed kernels
        return routed
    lin_launch = launch.get("linear", {})
    if w.shared_gate_up is not None:
        gu = linear(x, w.shared_gate_up)
        gate, up = gu.chunk(2, dim=-1)
    else:
        gate, up = linear(x, w.shared_gate, **lin_launch), linear(x, w.shared_up, **lin_launch)
    shared = linear(F.silu(gate) * up, w.shared_down, **lin_launch)
    shared = torch.sigmoid(F.linear(x, w.shared_expert_gate)) * shared  # [T, 1] * [T, H]
    return routed + shared

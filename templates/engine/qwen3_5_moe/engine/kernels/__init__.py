"""The engine's ops: Triton kernels on CUDA, plain-torch references elsewhere.

Every op has a reference in ``reference.py`` (the numerical specification) and a Triton
kernel in its own file (kernel → launcher → public ``*_triton`` function). The functions
below check their inputs, then dispatch on ``BACKEND``:

- ``"auto"`` (default): Triton when the first tensor is on CUDA, the reference otherwise;
- ``"reference"``: always the reference (debugging, parity bisection);
- ``"triton"``: always Triton (CPU tensors need ``TRITON_INTERPRET=1`` set before this
  package is imported; that is how the tests run the kernels here).

The initial value comes from the environment variable ``ENGINE_KERNELS``. ``REFERENCE_OPS``
names ops that take the reference even on CUDA (e.g. ``{"moe_nvfp4"}``), to bisect a parity
failure or to step around a kernel that misbehaves. Keyword
arguments after ``*`` (block sizes, ``num_warps``) go to the Triton launcher only, so the
engine can pass values from ``tunables.json``; the reference ignores them.
Shapes and formats: see README.md beside this file.
"""

from __future__ import annotations

import functools
import importlib
import os

import torch

from . import reference as ref
from . import reference_prefill as ref_prefill
from ._checks import (
    check_conv,
    check_conv_prefill,
    check_gated_norm,
    check_gdn_prefill,
    check_gdn_step,
    check_gdn_step_gated,
    check_linear,
    check_moe,
    check_norm,
    check_qk_rope,
    check_route,
)

BACKEND: str = os.environ.get("ENGINE_KERNELS", "auto")
REFERENCE_OPS: set[str] = set()
_BACKENDS = ("auto", "reference", "triton")

__all__ = [
    "BACKEND",
    "rmsnorm",
    "gated_rmsnorm",
    "nvfp4_linear",
    "route_topk",
    "qk_norm_rope_cache",
    "moe_nvfp4",
    "gdn_recurrent_step",
    "gdn_recurrent_step_gated",
    "causal_conv1d_update",
    "gdn_chunk_prefill",
    "causal_conv1d_prefill",
    "gdn_recurrent_prefill",
]


def _use_triton(t: torch.Tensor, op: str) -> bool:
    if BACKEND not in _BACKENDS:
        raise ValueError(f"kernels.BACKEND = {BACKEND!r} is not one of {_BACKENDS}; set it (or ENGINE_KERNELS) to one of them")
    if BACKEND == "reference" or op in REFERENCE_OPS:
        return False
    return BACKEND == "triton" or t.is_cuda


@functools.cache
def _triton(module: str, name: str):
    # imported on first use so CPU-only runs never compile or import the kernel modules
    return getattr(importlib.import_module(f".{module}", __name__), name)


def rmsnorm(
    x: torch.Tensor, w: torch.Tensor, eps: float, residual: torch.Tensor | None = None, **launch
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-centred RMSNorm with a fused residual add.

    Args:
        x: bf16 [T, H]; w: [H] (any float dtype; used as ``1 + w``); eps: added to mean(x²);
        residual: bf16 [T, H] or None.
    Returns:
        ``(y, s)``: ``s = x + residual`` (bf16, or ``x`` itself without residual) and
        ``y = s * rsqrt(mean(s²) + eps) * (1 + w)`` computed in fp32, bf16 [T, H].
    Launch keywords (Triton): ``num_warps``.
    Raises:
        ValueError: wrong rank, shape mismatch, or non-contiguous last dim.
    """
    check_norm(x, w, residual)
    if _use_triton(x, "rmsnorm"):
        return _triton("norm", "rmsnorm_triton")(x, w, eps, residual, **launch)
    return ref.rmsnorm_ref(x, w, eps, residual)


def gated_rmsnorm(o: torch.Tensor, z: torch.Tensor, w: torch.Tensor, eps: float, **launch) -> torch.Tensor:
    """HF ``Qwen3_5MoeRMSNormGated``: ``w * rmsnorm(o) * silu(z)`` (plain w) over the last dim.

    Args: o, z bf16 [N, D] or [T, NH, D], same shape, last dim contiguous, other strides free
    (z may be a view of a column slice, e.g. ``proj[:, a:b].view(T, NH, D)``); w [D].
    Returns: bf16, o's shape, contiguous. Launch keywords: ``num_warps``.
    Raises: ValueError on rank/shape/dtype mismatch or a non-contiguous last dim.
    """
    check_gated_norm(o, z, w)
    if _use_triton(o, "gated_rmsnorm"):
        return _triton("norm", "gated_rmsnorm_triton")(o, z, w, eps, **launch)
    return ref.gated_rmsnorm_ref(o, z, w, eps)


def nvfp4_linear(
    x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, gscale: torch.Tensor, **launch
) -> torch.Tensor:
    """``x @ W.T`` for an NVFP4 weight ``W = e2m1 · scale · gscale`` (W4A16 on Hopper).

    Args:
        x: bf16 [M, K]; packed: uint8 [N, K/2] (element 2j low nibble, 2j+1 high);
        scale: float8_e4m3fn [N, K/16]; gscale: fp32 scalar tensor (ModelOpt ``weight_scale_2``).
    Returns: bf16 [M, N], fp32 accumulation.
    Launch keywords: ``block_m``, ``block_n``, ``block_k``, ``num_warps``, ``num_stages``,
    ``split_k`` (GEMV path), ``gemv_max_m`` (largest M that takes the GEMV path).
    Raises: ValueError on shape/dtype mismatch or K not a multiple of 16.
    """
    check_linear(x, packed, scale, gscale)
    if _use_triton(x, "nvfp4_linear"):
        return _triton("linear", "nvfp4_linear_triton")(x, packed, scale, gscale, **launch)
    return ref.nvfp4_linear_ref(x, packed, scale, gscale)


def route_topk(logits: torch.Tensor, top_k: int, shared: bool = False, **launch) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k MoE routing: fp32 softmax over E router logits, the k largest, renormalised to sum 1.

    Args:
        logits: bf16 or fp32 [T, E]; with ``shared`` [T, E+1], column E being the shared expert's
            gate logit, which adds pair k: expert id E, weight ``bf16(sigmoid(logit))``.
        top_k: k, 1 ≤ k ≤ E.
    Returns: ``(ids int64 [T, k(+1)], weights fp32 [T, k(+1)])``, ids in descending probability.
    Launch keywords: ``num_warps``.
    Raises: ValueError on a bad rank, dtype or k.
    """
    check_route(logits, top_k, shared)
    if _use_triton(logits, "route_topk"):
        return _triton("route", "route_topk_triton")(logits, top_k, shared, **launch)
    return ref.route_topk_ref(logits, top_k, shared)


def qk_norm_rope_cache(
    qkv: torch.Tensor,
    q_w: torch.Tensor,
    k_w: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    token_slots: torch.Tensor,
    positions: torch.Tensor,
    num_q_heads: int,
    num_kv_heads: int,
    eps: float,
    **launch,
) -> torch.Tensor:
    """Attention prologue: per-head zero-centred RMSNorm of q and k, RoPE, K/V written to the cache.

    Args:
        qkv: bf16 [T, nq*2*hd + 2*nkv*hd], the fused projection (per q head [q | gate], then k, v).
        q_w, k_w: [hd] norm weights; cos, sin: fp32 [T, rotary_dim] of the tokens' positions.
        k_cache, v_cache: bf16 [NB, BS, nkv, hd], contiguous; row ``[token_slots[t], positions[t]]`` written.
        token_slots, positions: int [T]: (slot, position) for the static layout [S, L, nkv, hd]; for a paged
            pool the (block, row in block) of each token through the block table (``kv_pool.KVPool.locate``).
    Returns: q bf16 [T, nq, hd] (normed, roped). Launch keywords: ``num_warps``.
    Raises: ValueError on shape/dtype mismatch.
    """
    check_qk_rope(qkv, q_w, k_w, cos, sin, k_cache, v_cache, token_slots, positions, num_q_heads, num_kv_heads)
    args = (qkv, q_w, k_w, cos, sin, k_cache, v_cache, token_slots, positions, num_q_heads, num_kv_heads, eps)
    if _use_triton(qkv, "qk_norm_rope_cache"):
        return _triton("rope", "qk_norm_rope_cache_triton")(*args, **launch)
    return ref.qk_norm_rope_cache_ref(*args)


def moe_nvfp4(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w13: torch.Tensor,
    s13: torch.Tensor,
    g13: torch.Tensor,
    w2: torch.Tensor,
    s2: torch.Tensor,
    g2: torch.Tensor,
    **launch,
) -> torch.Tensor:
    """Routed NVFP4 experts: ``out[t] = sum_j w[t,j] · down_e(silu(gate_e(x_t)) · up_e(x_t))``.

    Args:
        x: bf16 [T, H]; topk_ids: int32/int64 [T, k] in [0, E); topk_weights: fp32 [T, k];
        w13: uint8 [E, 2I, H/2] (rows [0, I) gate, [I, 2I) up); s13: e4m3 [E, 2I, H/16];
        g13: fp32 [E, 2] (gate global, up global); w2: uint8 [E, H, I/2]; s2: e4m3 [E, H, I/16];
        g2: fp32 [E].
    Returns: bf16 [T, H]. Only hit experts' weights are read. The shared expert is not included.
    Launch keywords: ``block_m``, ``block_n``, ``block_k``, ``num_warps``, ``num_stages``.
    Raises: ValueError on shape/dtype mismatch.
    """
    check_moe(x, topk_ids, topk_weights, w13, s13, g13, w2, s2, g2)
    if _use_triton(x, "moe_nvfp4"):
        fn = _triton("moe", "moe_nvfp4_triton")
        return fn(x, topk_ids, topk_weights, w13, s13, g13, w2, s2, g2, **launch)
    return ref.moe_nvfp4_ref(x, topk_ids, topk_weights, w13, s13, g13, w2, s2, g2)


def gdn_recurrent_step(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor, slots: torch.Tensor, **launch,
) -> torch.Tensor:
    """One decode step of the gated delta rule for B sequences, updating ``state[slots]`` in place.

    Args:
        q, k: bf16 [B, HK, Dk]; v: bf16 [B, HV, Dv]; g, beta: fp32 [B, HV] (g = log decay ≤ 0);
        state: fp32 [S, HV, Dk, Dv] (contiguous); slots: int [B], distinct rows of state.
    Returns: o bf16 [B, HV, Dv]. Math: HF ``torch_recurrent_gated_delta_rule`` with
    ``use_qk_l2norm_in_kernel=True`` (see ``reference.gdn_recurrent_step_ref``).
    Launch keywords: ``block_v``, ``num_warps``.
    Raises: ValueError on shape/dtype mismatch or HV not a multiple of HK.
    """
    check_gdn_step(q, k, v, g, beta, state, slots)
    if _use_triton(q, "gdn_recurrent_step"):
        return _triton("gdn", "gdn_recurrent_step_triton")(q, k, v, g, beta, state, slots, **launch)
    return ref.gdn_recurrent_step_ref(q, k, v, g, beta, state, slots)


def gdn_recurrent_step_gated(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, slots: torch.Tensor, **launch,
) -> torch.Tensor:
    """``gdn_recurrent_step`` with ``beta = sigmoid(b)``, ``g = -exp(A_log) · softplus(a + dt_bias)`` fused in.

    Args: q, k, v, state, slots as ``gdn_recurrent_step``; a, b bf16 [B, HV] (in_proj's raw
    outputs, last dim contiguous, rows may be strided); A_log, dt_bias fp32 [HV] contiguous.
    Gates in fp32, torch softplus (threshold 20) (``reference.gdn_recurrent_step_gated_ref``).
    Returns: o bf16 [B, HV, Dv]. Launch keywords: ``block_v``, ``num_warps``.
    Raises: ValueError on shape/dtype mismatch or HV not a multiple of HK.
    """
    check_gdn_step_gated(q, k, v, a, b, A_log, dt_bias, state, slots)
    if _use_triton(q, "gdn_recurrent_step_gated"):
        fn = _triton("gdn", "gdn_recurrent_step_gated_triton")
        return fn(q, k, v, a, b, A_log, dt_bias, state, slots, **launch)
    return ref.gdn_recurrent_step_gated_ref(q, k, v, a, b, A_log, dt_bias, state, slots)


def causal_conv1d_update(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, slots: torch.Tensor, **launch
) -> torch.Tensor:
    """One decode step of the depthwise causal conv1d with SiLU, updating ``conv_state[slots]`` in place.

    Args:
        x: bf16 [B, C], last dim contiguous, rows may be strided (a column slice of in_proj's
        output needs no copy); conv_state: bf16 [S, C, W-1] (oldest input first, contiguous);
        weight: [C, W] (HF ``conv1d.weight.squeeze(1)``); slots: int [B], distinct.
    Returns: y bf16 [B, C] = silu(conv over [state | x]). Launch keywords: ``block_c``, ``num_warps``.
    Raises: ValueError on shape mismatch.
    """
    check_conv(x, conv_state, weight, slots)
    if _use_triton(x, "causal_conv1d_update"):
        return _triton("conv1d", "causal_conv1d_update_triton")(x, conv_state, weight, slots, **launch)
    return ref.causal_conv1d_update_ref(x, conv_state, weight, slots)


def gdn_chunk_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    slots: torch.Tensor,
    *,
    chunk_size: int = 64,
) -> torch.Tensor:
    """Chunked gated delta rule over packed sequences (varlen prefill), continuing from ``state[slots]``.

    Args:
        q, k: bf16 [T, HK, Dk]; v: bf16 [T, HV, Dv]; g, beta: fp32 [T, HV]; state: fp32
        [S, HV, Dk, Dv] (zero a new sequence's row first); cu_seqlens: int [N+1] (cu[0] = 0,
        cu[N] = T); slots: int [N], distinct; chunk_size: tokens per chunk (tunable ``gdn_chunk_size``).
    Returns: o bf16 [T, HV, Dv]; each sequence's final state is written to its slot. Agrees with
    ``gdn_recurrent_step`` applied token by token at any split point.
    Backend: the torch chunked form on every device for now (no Triton kernel yet); it syncs
    once to read cu_seqlens.
    Raises: ValueError on shape/dtype mismatch.
    """
    check_gdn_prefill(q, k, v, g, beta, state, cu_seqlens, slots)
    return ref_prefill.gdn_chunk_prefill_ref(q, k, v, g, beta, state, cu_seqlens, slots, chunk_size)


def causal_conv1d_prefill(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    cu_seqlens: torch.Tensor,
    slots: torch.Tensor,
    **launch,
) -> torch.Tensor:
    """Depthwise causal conv1d + SiLU over packed sequences, continuing from ``conv_state[slots]``.

    Args: x bf16 [T, C]; conv_state bf16 [S, C, W-1] (zero a new sequence's row first);
    weight [C, W]; cu_seqlens int [N+1]; slots int [N].
    Returns: y bf16 [T, C]; ``conv_state[slots[i]]`` ← the last W-1 inputs of sequence i.
    Backend: Triton on CUDA (cu_seqlens read on the device, no sync; launch keywords
    ``block_c``, ``num_warps``), else torch (F.conv1d per sequence, syncs to read cu_seqlens).
    Raises: ValueError on shape mismatch.
    """
    check_conv_prefill(x, conv_state, weight, cu_seqlens, slots)
    if _use_triton(x, "causal_conv1d_prefill"):
        return _triton("prefill", "causal_conv1d_prefill_triton")(x, conv_state, weight, cu_seqlens, slots, **launch)
    return ref_prefill.causal_conv1d_prefill_ref(x, conv_state, weight, cu_seqlens, slots)


def gdn_recurrent_prefill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    state: torch.Tensor, cu_seqlens: torch.Tensor, slots: torch.Tensor, **launch,
) -> torch.Tensor:
    """``gdn_chunk_prefill``'s contract, computed token by token with the state in registers.

    On CUDA a Triton kernel (one program per v block, v head and sequence; cu_seqlens read on
    the device, no sync; launch keywords ``block_v``, ``num_warps``): no tensor cores, suited
    to short prompts and chunked-prefill pieces; exact against ``gdn_recurrent_step``.
    Elsewhere the torch chunked reference (``gdn_chunk_prefill_ref``, same recurrence).
    Returns o bf16 [T, HV, Dv]; writes each sequence's final state to its slot.
    Raises: ValueError on shape/dtype mismatch.
    """
    check_gdn_prefill(q, k, v, g, beta, state, cu_seqlens, slots)
    if _use_triton(q, "gdn_recurrent_prefill"):
        fn = _triton("prefill", "gdn_recurrent_prefill_triton")
        return fn(q, k, v, g, beta, state, cu_seqlens, slots, **launch)
    return ref_prefill.gdn_chunk_prefill_ref(q, k, v, g, beta, state, cu_seqlens, slots)

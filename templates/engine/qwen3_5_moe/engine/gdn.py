"""Gated DeltaNet mixer (HF ``Qwen3_5MoeGatedDeltaNet``) over packed sequences with slot state.

``in_proj`` gives qkv | z | b | a. qkv goes through a causal depthwise conv1d (kernel W, no
bias) + SiLU, continuing each slot's last W-1 inputs; then q | k | v split. ``beta = sigmoid(b)``,
``g = -exp(A_log) * softplus(a + dt_bias)`` (fp32). The gated delta rule runs per value head with
an fp32 state [dk, dv]: ``S ← S·exp(g); δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq`` with q, k
L2-normalised and q × dk^-0.5; each key head serves ``nv/nk`` consecutive value heads. Prefill
uses the chunked (UT-transform) form over packed sequences (``ops.gdn_chunk``: Triton with the
gates fused on CUDA, no host sync; or ``kernels.gdn_chunk_prefill``, torch, by tunable) after the
parallel conv1d (``ops.conv1d_prefill``),
decode the recurrent step with the gates fused in (``kernels.gdn_recurrent_step_gated``, which
reads a, b, and the conv1d update and gated norm read in_proj's column slices, without copies);
they are the same math, so any split of a sequence between them gives the same result up to
fp32 rounding.
Output: ``out_proj(w * rmsnorm(o) * silu(z))``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import kernels
from .batch import Batch
from .cache import StateCache
from .linear import linear
from .ops import conv1d_prefill, gdn_chunk
from .target import ModelDims
from .tunables import Tunables
from .weights import GdnWeights


def gdn_forward(
    x: torch.Tensor, w: GdnWeights, layer: int, batch: Batch, cache: StateCache, dims: ModelDims, tun: Tunables
) -> torch.Tensor:
    """One Gated DeltaNet mixer over the packed tokens, advancing each slot's conv and delta-rule state.

    Args:
        x: bf16 [T, H], the input-normed hidden states.
        layer: model layer index (selects the state tensors).
        tun: tunables (``gdn_chunk_size``, ``gdn_recurrent_prefill_max_tokens``, ``gdn_prefill_ops``,
            ``conv1d_prefill_ops``).
    Returns:
        bf16 [T, H].
    """
    t = x.shape[0]
    nk, nv = dims.linear_num_key_heads, dims.linear_num_value_heads
    dk, dv = dims.linear_key_head_dim, dims.linear_value_head_dim
    proj = linear(x, w.in_proj)
    mixed, z, b, a = proj.split([dims.conv_dim, dims.value_dim, nv, nv], dim=-1)  # column slices, no copies
    j = cache.layer_index[layer]
    conv_state, ssm = cache.conv[j], cache.ssm[j]
    if batch.decode:  # the kernels read the slices in place and compute beta, g themselves
        mixed = kernels.causal_conv1d_update(mixed, conv_state, w.conv, batch.slots_t)
        q, k, v = mixed.split([dims.key_dim, dims.key_dim, dims.value_dim], dim=-1)
        o = kernels.gdn_recurrent_step_gated(
            q.reshape(t, nk, dk), k.reshape(t, nk, dk), v.reshape(t, nv, dv), a, b, w.A_log, w.dt_bias, ssm,
            batch.slots_t,
        )  # [B, nv, dv]
    else:
        if tun.conv1d_prefill_ops:  # reads in_proj's column slice in place
            mixed = conv1d_prefill.causal_conv1d_prefill(mixed, conv_state, w.conv, batch.cu_t, batch.slots_t)
        else:
            mixed = kernels.causal_conv1d_prefill(mixed.contiguous(), conv_state, w.conv, batch.cu_t, batch.slots_t)
        q, k, v = mixed.split([dims.key_dim, dims.key_dim, dims.value_dim], dim=-1)
        q, k, v = q.reshape(t, nk, dk), k.reshape(t, nk, dk), v.reshape(t, nv, dv)
        if tun.gdn_prefill_ops and max(batch.lens) > tun.gdn_recurrent_prefill_max_tokens:  # gates fused in
            o = gdn_chunk.gdn_chunk_prefill(q, k, v, a, b, w.A_log, w.dt_bias, ssm, batch.cu_t, batch.slots_t,
                                            chunk_size=tun.gdn_chunk_size)
        else:
            beta = torch.sigmoid(b.float())  # [T, nv]
            g = -w.A_log.exp() * F.softplus(a.float() + w.dt_bias)  # [T, nv]
            args = (q, k, v, g, beta, ssm, batch.cu_t, batch.slots_t)
            if max(batch.lens) <= tun.gdn_recurrent_prefill_max_tokens:
                o = kernels.gdn_recurrent_prefill(*args)  # [T, nv, dv]
            else:
                o = kernels.gdn_chunk_prefill(*args, chunk_size=tun.gdn_chunk_size)
    # z [T, nv*dv] → [T, nv, dv] is a view (rows keep in_proj's stride): the norm reads it in place
    normed = kernels.gated_rmsnorm(o.reshape(t, nv, dv), z.view(t, nv, dv), w.norm, dims.rms_norm_eps)
    return linear(normed.reshape(t, dims.value_dim), w.out_proj)

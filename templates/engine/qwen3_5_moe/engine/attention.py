"""Gated full attention (HF ``Qwen3_5MoeAttention``) over packed sequences with a slot KV cache
(static per-slot blocks or a paged block pool, read and written through ``cache.block_table``).

Per token: ``q_proj`` gives per head [q | gate] (head_dim each); q and k get the zero-centred
RMSNorm over head_dim, then RoPE on their first ``rotary_dim`` dims (rotate-half, theta from
the config; positions per sequence); attention is causal GQA with scale head_dim^-0.5 over the
sequence's cached keys plus its new ones; the output is multiplied by sigmoid(gate) before
``o_proj``. The text model's mRoPE has equal position ids in its three sections, which makes
it this plain RoPE.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import kernels
from .kernels.paged import gather_kv
from .batch import Batch
from .cache import StateCache
from .linear import linear
from .ops import attention_prefill
from .target import ModelDims
from .weights import AttentionWeights


class Rope:
    """Rotary tables for the first ``rotary_dim`` dims of a head: ``inv_freq[i] = theta^(-2i/rotary_dim)``
    (HF ``compute_default_rope_parameters``), angles computed in fp32 per call."""

    def __init__(self, dims: ModelDims, device: torch.device):
        d = dims.rotary_dim
        self.rotary_dim = d
        self.inv_freq = 1.0 / (dims.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 cos, sin [T, rotary_dim] for int64 positions [T] (frequencies repeated for both halves)."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, d/2]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()


def attention_forward(
    x: torch.Tensor,
    w: AttentionWeights,
    layer: int,
    batch: Batch,
    cache: StateCache,
    cos_sin: tuple[torch.Tensor, torch.Tensor],
    dims: ModelDims,
    decode_splits: int = 0,
    prefill_ops: int = 0,
    kv_loc: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """One attention mixer over the packed tokens; appends their K/V to the slots' cache. With a paged
    cache each slot must already own KV blocks for its ``start + len`` positions (``StateCache.reserve``;
    ``Engine`` does it before every forward, outside any CUDA graph).

    Args:
        x: bf16 [T, H], the input-normed hidden states.
        layer: model layer index (selects the cache tensors).
        cos_sin: fp32 cos, sin [T, rotary_dim] of the tokens' positions (``Rope.cos_sin``, once per forward).
        decode_splits: tunable ``attention_decode_splits`` (0: SDPA over gathered K/V; N: split-K kernel).
        prefill_ops: tunable ``attention_prefill_ops`` (1: ``ops.attention_prefill``, flash attention over the
            cache with the gate fused, no host sync; 0: SDPA per sequence with a causal mask).
        kv_loc: the tokens' (block, row) int64 [T] each (``KVPool.locate``, once per forward); None: located here.
    Returns:
        bf16 [T, H].
    """
    t = x.shape[0]
    nq, nkv, hd = dims.num_attention_heads, dims.num_key_value_heads, dims.head_dim
    qkv = linear(x, w.qkv_proj)  # [T, nq*2*hd + 2*nkv*hd]
    gate = qkv[:, : nq * 2 * hd].view(t, nq, 2 * hd)[..., hd:]  # [T, nq, hd], strided
    j = cache.layer_index[layer]
    kc, vc = cache.k[j], cache.v[j]  # [NB, BS, nkv, hd]
    table = cache.block_table if cache.kv.paged else None  # int32 [S, max_blocks]; None: static, slot s = block s
    kv_blocks, kv_rows = kv_loc or cache.kv.locate(batch.token_slots, batch.positions)  # static: (slots, positions)
    # q, k normed and roped; k and v written into the cache at (block, row) of (slot, position)
    q = kernels.qk_norm_rope_cache(qkv, w.q_norm, w.k_norm, *cos_sin, kc, vc, kv_blocks, kv_rows,
                                   nq, nkv, dims.rms_norm_eps)  # [T, nq, hd]
    scale = hd**-0.5
    if batch.decode and decode_splits:
        o = _decode_attention_splitk(q, kc, vc, batch, scale, decode_splits, gate, table)  # gated inside
        return linear(o.reshape(t, nq * hd), w.o_proj)
    if not batch.decode and prefill_ops:  # reads the cache in place; output already gated
        o = attention_prefill.attention_prefill(q, kc, vc, gate, batch.cu_t, batch.positions, batch.slots_t, scale, table)
        return linear(o.reshape(t, nq * hd), w.o_proj)
    if batch.decode:
        o = _decode_attention_sdpa(q, kc, vc, batch, scale, table)
    else:
        o = torch.empty(t, nq, hd, dtype=x.dtype, device=x.device)
        for i, (slot, start, n) in enumerate(zip(batch.slots, batch.starts, batch.lens)):
            a, b = batch.cu_seqlens[i], batch.cu_seqlens[i + 1]
            total = start + n
            qi = q[a:b].transpose(0, 1).unsqueeze(0)  # [1, nq, n, hd]
            ki = gather_kv(kc, table, slot, total).transpose(0, 1).unsqueeze(0)  # [1, nkv, total, hd]
            vi = gather_kv(vc, table, slot, total).transpose(0, 1).unsqueeze(0)
            # query r sits at position start + r and sees keys 0..start + r
            mask = torch.arange(total, device=x.device)[None, :] <= (start + torch.arange(n, device=x.device))[:, None]
            oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=scale, enable_gqa=nq != nkv)
            o[a:b] = oi[0].transpose(0, 1)
    o = (o * torch.sigmoid(gate)).reshape(t, nq * hd)
    return linear(o, w.o_proj)


def _decode_attention_splitk(
    q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, batch: Batch, scale: float, splits: int, gate: torch.Tensor,
    table: torch.Tensor | None,
) -> torch.Tensor:
    """Split-K kernel (reads the cache in place through ``table``, no host sync): q, gate [B, nq, hd] ->
    ``attn * sigmoid(gate)``."""
    from .kernels import attention_decode as ad  # imports triton; only when asked for

    lens = (batch.positions + 1).to(torch.int32)  # on device: no host sync, graph-safe
    if q.is_cuda:
        return ad.attention_decode(q.contiguous(), kc, vc, batch.slots_t, lens, scale, splits=splits, gate=gate,
                                   block_table=table)
    return ad.attention_decode_ref(q, kc, vc, batch.slots_t, lens, scale, gate=gate, block_table=table)


def _decode_attention_sdpa(
    q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, batch: Batch, scale: float, table: torch.Tensor | None
) -> torch.Tensor:
    """SDPA over each sequence's own gathered K/V, one call per sequence (host reads of the slots and lengths);
    q [B, nq, hd] -> [B, nq, hd].

    Why one call per sequence and not one padded call: SDPA's reduction is blocked along the keys, so padding a
    sequence to the batch's longest length changes its rounding, and a sequence's logits (and, through a near-tied
    top-k routing choice downstream, its greedy tokens) would depend on which other sequences share its step."""
    o = torch.empty_like(q)
    gqa = q.shape[1] != kc.shape[2]
    for i, (slot, start) in enumerate(zip(batch.slots, batch.starts)):
        k = gather_kv(kc, table, slot, start + 1).transpose(0, 1).unsqueeze(0)  # [1, nkv, n, hd]
        v = gather_kv(vc, table, slot, start + 1).transpose(0, 1).unsqueeze(0)
        o[i] = F.scaled_dot_product_attention(q[i, :, None].unsqueeze(0), k, v, scale=scale, enable_gqa=gqa)[0, :, 0]
    return o

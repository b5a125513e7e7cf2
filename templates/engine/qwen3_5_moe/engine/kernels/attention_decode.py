"""Decode attention: one query token per sequence against its slot's KV cache (split-K flash decoding).

The cache is read through a block table (``kernels.paged``): position p of slot s is row
``p % block_size`` of block ``block_table[s, p // block_size]``; no table means the static layout
(slot s = block s, one block of L rows), compiled without the table (``PAGED`` 0: the kernel before paging).

Kernel → launcher → public API, with the plain-torch reference ``attention_decode_ref`` beside it.
The grid is static for a given batch size (batch × kv heads × ``splits``), and every length is
read on the device, so a decode step that calls it can be captured in a CUDA graph: a split that
starts past its sequence's length writes an empty partial (m = -inf, l = 0) and the combine
step ignores it. Each program serves the whole GQA group of one kv head, so K/V are read once
per group rather than once per query head.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ._common import round_bf16
from .paged import check_table, gather_kv


#: Triton's CPU interpreter (TRITON_INTERPRET=1) computes tl.dot on bf16 tiles from their raw
#: bits (seen with triton 3.9), so under it the tiles are widened to fp32 first; on a GPU the
#: bf16 tensor-core path is used.
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _attention_decode_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, slots_ptr, lens_ptr, o_ptr, m_ptr, l_ptr, scale, block_size,
    stride_qb, stride_qh, stride_tb,
    stride_ks, stride_kl, stride_kh,
    stride_vs, stride_vl, stride_vh,
    stride_ob, stride_oh, stride_os,
    stride_mb, stride_mh,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_LEN: tl.constexpr,
    DOT_F32: tl.constexpr, PAGED: tl.constexpr,
):
    i_b, i_h, i_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slots_ptr + i_b).to(tl.int64)
    n = tl.load(lens_ptr + i_b)
    start = i_s * SPLIT_LEN
    end = tl.minimum(n, start + SPLIT_LEN)

    o_g = tl.arange(0, GROUP_PAD)
    o_d = tl.arange(0, D)
    m_g = o_g < GROUP
    heads = i_h * GROUP + o_g  # query heads of this kv head
    p_q = q_ptr + i_b * stride_qb + heads[:, None] * stride_qh + o_d[None, :]
    b_q = tl.load(p_q, mask=m_g[:, None], other=0.0)  # [G, D] bf16
    if DOT_F32:
        b_q = b_q.to(tl.float32)

    b_m = tl.full([GROUP_PAD], float("-inf"), dtype=tl.float32)
    b_l = tl.zeros([GROUP_PAD], dtype=tl.float32)
    b_acc = tl.zeros([GROUP_PAD, D], dtype=tl.float32)
    for off in range(start, end, BLOCK_N):
        o_n = off + tl.arange(0, BLOCK_N)
        m_n = o_n < end
        if PAGED == 2:  # the tile lies in one block (BLOCK_N divides block_size; tiles start at multiples of BLOCK_N)
            b_blk = tl.load(table_ptr + slot * stride_tb + off // block_size).to(tl.int64)
            o_row = (off % block_size + tl.arange(0, BLOCK_N)).to(tl.int64)
            p_k = k_ptr + b_blk * stride_ks + o_row[:, None] * stride_kl + i_h * stride_kh + o_d[None, :]
            p_v = v_ptr + b_blk * stride_vs + o_row[:, None] * stride_vl + i_h * stride_vh + o_d[None, :]
        elif PAGED == 1:  # a block per key
            b_blks = tl.load(table_ptr + slot * stride_tb + o_n // block_size, mask=m_n, other=0).to(tl.int64)  # [N]
            o_row = (o_n % block_size).to(tl.int64)
            p_k = k_ptr + b_blks[:, None] * stride_ks + o_row[:, None] * stride_kl + i_h * stride_kh + o_d[None, :]
            p_v = v_ptr + b_blks[:, None] * stride_vs + o_row[:, None] * stride_vl + i_h * stride_vh + o_d[None, :]
        else:  # static: slot s is block s
            p_k = k_ptr + slot * stride_ks + o_n[:, None].to(tl.int64) * stride_kl + i_h * stride_kh + o_d[None, :]
            p_v = v_ptr + slot * stride_vs + o_n[:, None].to(tl.int64) * stride_vl + i_h * stride_vh + o_d[None, :]
        b_k = tl.load(p_k, mask=m_n[:, None], other=0.0)  # [N, D]
        b_v = tl.load(p_v, mask=m_n[:, None], other=0.0)
        if DOT_F32:
            b_k, b_v = b_k.to(tl.float32), b_v.to(tl.float32)
        b_s = tl.dot(b_q, tl.trans(b_k)) * scale  # [G, N] fp32
        b_s = tl.where(m_n[None, :], b_s, float("-inf"))
        b_m_new = tl.maximum(b_m, tl.max(b_s, axis=1))
        b_alpha = tl.exp(b_m - b_m_new)
        b_p = tl.exp(b_s - b_m_new[:, None])
        b_l = b_l * b_alpha + tl.sum(b_p, axis=1)
        b_acc = b_acc * b_alpha[:, None] + tl.dot(b_p.to(b_v.dtype), b_v)
        b_m = b_m_new

    p_o = o_ptr + i_b * stride_ob + heads[:, None] * stride_oh + i_s * stride_os + o_d[None, :]
    tl.store(p_o, b_acc, mask=m_g[:, None])
    p_m = m_ptr + i_b * stride_mb + heads * stride_mh + i_s
    tl.store(p_m, b_m, mask=m_g)
    tl.store(l_ptr + i_b * stride_mb + heads * stride_mh + i_s, b_l, mask=m_g)


@triton.jit
def _combine_kernel(
    o_ptr, m_ptr, l_ptr, g_ptr, out_ptr,
    stride_ob, stride_oh, stride_os, stride_mb, stride_mh, stride_gb, stride_gh, stride_outb, stride_outh,
    S, HAS_GATE: tl.constexpr, BLOCK_S: tl.constexpr, D: tl.constexpr,
):
    """Program (b, h): merge the S split partials of one query head, times sigmoid(gate) when given."""
    i_b = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1).to(tl.int64)
    o_s = tl.arange(0, BLOCK_S)
    o_d = tl.arange(0, D)
    m_s = o_s < S
    b_m = tl.load(m_ptr + i_b * stride_mb + i_h * stride_mh + o_s, mask=m_s, other=float("-inf"))
    b_l = tl.load(l_ptr + i_b * stride_mb + i_h * stride_mh + o_s, mask=m_s, other=0.0)
    b_w = tl.exp(b_m - tl.max(b_m, axis=0))  # split 0 always holds a key, so the max is finite
    b_w = tl.where(m_s, b_w, 0.0)
    p_o = o_ptr + i_b * stride_ob + i_h * stride_oh + o_s[:, None] * stride_os + o_d[None, :]
    b_o = tl.load(p_o, mask=m_s[:, None], other=0.0)  # [S, D]
    b_out = round_bf16(tl.sum(b_o * b_w[:, None], axis=0) / tl.sum(b_l * b_w, axis=0))
    if HAS_GATE:  # HF multiplies in bf16: sigmoid(gate) rounded, the product rounded
        b_g = tl.load(g_ptr + i_b * stride_gb + i_h * stride_gh + o_d).to(tl.float32)
        b_out = round_bf16(b_out * round_bf16(tl.sigmoid(b_g)))
    tl.store(out_ptr + i_b * stride_outb + i_h * stride_outh + o_d, b_out.to(out_ptr.dtype.element_ty))


def attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    lens: torch.Tensor,
    scale: float,
    *,
    splits: int = 16,
    gate: torch.Tensor | None = None,
    block_table: torch.Tensor | None = None,
    block_n: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Attention of one query per sequence over the first ``lens[b]`` cached positions of its slot.

    Args:
        q: bf16 [B, HQ, D], already normed and rotated.
        k_cache, v_cache: bf16 [NB, BS, HKV, D] (block, row, kv head, dim); last dim contiguous.
            The current token's K/V must already be written.
        slots: int32/int64 [B] slot of each sequence (its row of ``block_table``).
        lens: int32 [B], keys to attend (≥ 1, ≤ L = max_blocks * BS); read on the device, never on the host.
        scale: softmax scale (head_dim^-0.5 for this model).
        splits: programs per (sequence, kv head) along the cache; each covers cdiv(L, splits)
            positions, so the grid does not depend on the lengths (CUDA-graph safe).
        gate: bf16 [B, HQ, D] (last dim contiguous) or None: the output is multiplied by
            ``sigmoid(gate)`` in bf16 (HF's gated attention), inside the split-combine kernel.
        block_table: int32 [S, max_blocks] contiguous (``kv_pool.KVPool.block_table``), or None for the
            static layout (the cache is [S, L, HKV, D], slot s its row s).
    Returns:
        bf16 [B, HQ, D].
    Raises:
        ValueError: shapes disagree, HQ is not a multiple of HKV, or D is not a power of two.
    """
    b, hq, d = q.shape
    s, block_size, hkv, dk = k_cache.shape
    if dk != d or v_cache.shape != k_cache.shape or hq % hkv or d & (d - 1):
        raise ValueError(f"attention_decode: q {tuple(q.shape)} vs cache {tuple(k_cache.shape)} / {tuple(v_cache.shape)}")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("attention_decode: the head dim of q and the caches must be contiguous")
    if gate is not None and (tuple(gate.shape) != (b, hq, d) or gate.stride(-1) != 1):
        raise ValueError(f"attention_decode: gate {tuple(gate.shape)} must be [B, HQ, D] = {(b, hq, d)} with a contiguous last dim")
    check_table("attention_decode", k_cache, block_table)
    # PAGED: 0 static (the table unused), 2 one block per key tile (block_n divides the block size), 1 a block per key
    paged = 0 if block_table is None else 2 if block_size % block_n == 0 else 1
    cache_len = block_size if block_table is None else block_table.shape[1] * block_size
    if block_table is None:
        block_table = lens  # not read
    group = hq // hkv
    split_len = triton.cdiv(triton.cdiv(cache_len, splits), block_n) * block_n
    splits = triton.cdiv(cache_len, split_len)
    o = torch.empty(b, hq, splits, d, dtype=torch.float32, device=q.device)
    m = torch.empty(b, hq, splits, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    _attention_decode_kernel[(b, hkv, splits)](
        q, k_cache, v_cache, block_table, slots, lens, o, m, l, scale, block_size,
        q.stride(0), q.stride(1), block_table.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        m.stride(0), m.stride(1),
        DOT_F32=_INTERPRET, PAGED=paged,
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), D=d, BLOCK_N=block_n, SPLIT_LEN=split_len,
        num_warps=num_warps,
    )
    out = torch.empty_like(q)
    g = gate if gate is not None else q
    _combine_kernel[(b, hq)](
        o, m, l, g, out,
        o.stride(0), o.stride(1), o.stride(2), m.stride(0), m.stride(1), g.stride(0), g.stride(1), out.stride(0), out.stride(1),
        splits, HAS_GATE=gate is not None, BLOCK_S=triton.next_power_of_2(splits), D=d, num_warps=num_warps,
    )
    return out


def attention_decode_ref(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, lens: torch.Tensor, scale: float,
    gate: torch.Tensor | None = None, block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain-torch reference of ``attention_decode`` (same arguments, no tuning): fp32 softmax
    over each sequence's first ``lens[b]`` keys, GQA by repeating kv heads, rounded to bf16, then
    ``* sigmoid(gate)`` in bf16 when a gate is given. Returns bf16 [B, HQ, D]."""
    b, hq, d = q.shape
    hkv = k_cache.shape[2]
    out = torch.empty_like(q)
    for i in range(b):
        n = int(lens[i])
        k = gather_kv(k_cache, block_table, int(slots[i]), n).float().repeat_interleave(hq // hkv, dim=1)  # [n, HQ, D]
        v = gather_kv(v_cache, block_table, int(slots[i]), n).float().repeat_interleave(hq // hkv, dim=1)
        p = torch.softmax(torch.einsum("hd,nhd->hn", q[i].float(), k) * scale, dim=-1)
        out[i] = torch.einsum("hn,nhd->hd", p, v).to(q.dtype)
    return out if gate is None else out * torch.sigmoid(gate)

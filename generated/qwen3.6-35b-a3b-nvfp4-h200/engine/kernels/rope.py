"""``qk_norm_rope_cache``: the attention prologue in one kernel. Reference: ``reference.qk_norm_rope_cache_ref``.

From the fused projection row ``qkv [T, nq*2*hd + 2*nkv*hd]`` (per q head ``[q | gate]``, then k,
then v) one program per (token, head) does what the torch path does in about 28 launches per
layer: zero-centred RMSNorm of a q or k head over hd (rounded to bf16), rotate-half RoPE on its
first ``rotary_dim`` dims in fp32 (rounded again), and the store: q heads to ``q [T, nq, hd]``,
k and v heads straight into the KV cache at ``[slot, position]``.

RoPE needs element i's partner i ± rotary_dim/2; the program loads the row again at the
partner offsets and normalises those values with the same arithmetic, so both are the bits the
unfused path would hold, without a register shuffle.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import new_empty, round_bf16


@triton.jit
def _normed(p_row, p_w, o, m, rstd):
    """round_bf16(x[o] * rstd * (1 + w[o])) for the offsets o of one head (``rmsnorm`` kernel's arithmetic)."""
    b_x = tl.load(p_row + o, mask=m, other=0.0).to(tl.float32)
    b_w = tl.load(p_w + o, mask=m, other=0.0).to(tl.float32)
    return round_bf16(b_x * rstd * (1.0 + b_w))


@triton.jit
def _qk_norm_rope_kernel(
    qkv_ptr, qw_ptr, kw_ptr, cos_ptr, sin_ptr, q_ptr, kc_ptr, vc_ptr, slot_ptr, pos_ptr,
    HD, ROT, eps,
    stride_t, stride_cos, stride_qt, stride_qh, stride_cs, stride_cp, stride_ch,
    NQ: tl.constexpr, NKV: tl.constexpr, BLOCK_D: tl.constexpr,
):
    i_t = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < HD
    i_s = tl.load(slot_ptr + i_t).to(tl.int64)
    i_p = tl.load(pos_ptr + i_t).to(tl.int64)
    if i_h >= NQ + NKV:  # v head: a copy into the cache
        p_row = qkv_ptr + i_t * stride_t + NQ * 2 * HD + NKV * HD + (i_h - NQ - NKV) * HD
        b_v = tl.load(p_row + o_d, mask=m_d, other=0.0)
        tl.store(vc_ptr + i_s * stride_cs + i_p * stride_cp + (i_h - NQ - NKV) * stride_ch + o_d, b_v, mask=m_d)
    else:
        if i_h < NQ:
            p_row = qkv_ptr + i_t * stride_t + i_h * 2 * HD  # q part of [q | gate]
            p_w = qw_ptr
        else:
            p_row = qkv_ptr + i_t * stride_t + NQ * 2 * HD + (i_h - NQ) * HD
            p_w = kw_ptr
        b_x = tl.load(p_row + o_d, mask=m_d, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(b_x * b_x, axis=0) / HD + eps)
        b_y = _normed(p_row, p_w, o_d, m_d, rstd)
        half = ROT // 2
        m_r = o_d < ROT
        o_partner = tl.where(o_d < half, o_d + half, o_d - half)
        b_partner = _normed(p_row, p_w, o_partner, m_r, rstd)
        b_rot = tl.where(o_d < half, -b_partner, b_partner)  # rotate_half
        b_cos = tl.load(cos_ptr + i_t * stride_cos + o_d, mask=m_r, other=1.0)
        b_sin = tl.load(sin_ptr + i_t * stride_cos + o_d, mask=m_r, other=0.0)
        b_y = tl.where(m_r, round_bf16(b_y * b_cos + b_rot * b_sin), b_y)
        if i_h < NQ:
            tl.store(q_ptr + i_t * stride_qt + i_h * stride_qh + o_d, b_y.to(q_ptr.dtype.element_ty), mask=m_d)
        else:
            p_k = kc_ptr + i_s * stride_cs + i_p * stride_cp + (i_h - NQ) * stride_ch + o_d
            tl.store(p_k, b_y.to(kc_ptr.dtype.element_ty), mask=m_d)


def qk_norm_rope_cache_triton(
    qkv: torch.Tensor, q_w: torch.Tensor, k_w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor, token_slots: torch.Tensor, positions: torch.Tensor,
    num_q_heads: int, num_kv_heads: int, eps: float, *, num_warps: int = 2,
) -> torch.Tensor:
    """Triton twin of ``reference.qk_norm_rope_cache_ref``; shapes as in ``kernels.qk_norm_rope_cache``.

    qkv needs a contiguous last dim; cos/sin fp32 [T, rotary_dim] contiguous; the caches contiguous.
    """
    t_count = qkv.shape[0]
    hd = k_cache.shape[-1]
    q = new_empty((t_count, num_q_heads, hd), qkv.dtype, qkv.device)
    if t_count == 0:
        return q
    cos, sin = cos.contiguous(), sin.contiguous()
    grid = (t_count, num_q_heads + 2 * num_kv_heads)
    _qk_norm_rope_kernel[grid](
        qkv, q_w, k_w, cos, sin, q, k_cache, v_cache, token_slots, positions,
        hd, cos.shape[1], eps,
        qkv.stride(0), cos.stride(0), q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        NQ=num_q_heads, NKV=num_kv_heads, BLOCK_D=triton.next_power_of_2(hd), num_warps=num_warps,
    )
    return q

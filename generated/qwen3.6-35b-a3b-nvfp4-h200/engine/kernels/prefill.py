"""Varlen prefill kernels for the Gated DeltaNet layer: causal conv1d and the fused recurrent delta rule.

Sequences are packed along T and delimited by ``cu_seqlens`` (read on the device: no host
sync, CUDA-graph capturable); sequence i continues from ``state[slots[i]]`` and leaves its
final state there. References: ``reference_prefill.causal_conv1d_prefill_ref`` and
``reference_prefill.gdn_chunk_prefill_ref`` (the same recurrence computed in chunks).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import new_empty, round_bf16


@triton.jit
def _conv_input(x_ptr, p_st, bos, j, o_c, m_c, stride_xt, W: tl.constexpr):
    """Input j of a sequence (j < 0: from the conv state, whose last entry is j = -1), fp32 [BC]."""
    m_x = (o_c.to(tl.int64) * 0 + j) >= 0  # j as a vector: a scalar mask is not portable
    b_x = tl.load(x_ptr + (bos + j) * stride_xt + o_c, mask=m_c & m_x, other=0.0)
    b_s = tl.load(p_st + (W - 1 + j), mask=m_c & (~m_x), other=0.0)
    return tl.where(m_x, b_x.to(tl.float32), b_s.to(tl.float32))


@triton.jit
def _conv_prefill_kernel(
    x_ptr, state_ptr, w_ptr, cu_ptr, slot_ptr, y_ptr,
    C, stride_xt, stride_ss, stride_sc, stride_wc, stride_yt,
    W: tl.constexpr, BLOCK_C: tl.constexpr,
):
    i_n = tl.program_id(0)
    i_c = tl.program_id(1)
    bos = tl.load(cu_ptr + i_n).to(tl.int64)
    seq_len = tl.load(cu_ptr + i_n + 1).to(tl.int64) - bos
    o_c = i_c * BLOCK_C + tl.arange(0, BLOCK_C)
    m_c = o_c < C
    i_s = tl.load(slot_ptr + i_n).to(tl.int64)
    p_st = state_ptr + i_s * stride_ss + o_c.to(tl.int64) * stride_sc  # [BC], oldest input first
    p_w = w_ptr + o_c.to(tl.int64) * stride_wc
    for t in range(0, seq_len):
        b_acc = tl.zeros([BLOCK_C], dtype=tl.float32)
        for i_w in tl.static_range(W):
            b_in = _conv_input(x_ptr, p_st, bos, t - (W - 1) + i_w, o_c, m_c, stride_xt, W)
            b_acc += b_in * tl.load(p_w + i_w, mask=m_c, other=0.0).to(tl.float32)
        b_y = b_acc * tl.sigmoid(b_acc)
        tl.store(y_ptr + (bos + t) * stride_yt + o_c, round_bf16(b_y).to(y_ptr.dtype.element_ty), mask=m_c)
    # new state[i] = input[L - (W-1) + i]; it may read old state[L + i], never one written before it
    for i_w in tl.static_range(W - 1):
        b_new = _conv_input(x_ptr, p_st, bos, seq_len - (W - 1) + i_w, o_c, m_c, stride_xt, W)
        tl.store(p_st + i_w, b_new.to(state_ptr.dtype.element_ty), mask=m_c)


@triton.jit
def _gdn_prefill_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, state_ptr, cu_ptr, slot_ptr, o_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
    stride_gt, stride_betat, stride_ot, stride_oh,
    HV, DK, DV, scale,
    GROUP: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.program_id(2)
    i_hk = i_h // GROUP
    bos = tl.load(cu_ptr + i_n).to(tl.int64)
    eos = tl.load(cu_ptr + i_n + 1).to(tl.int64)
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < DK
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < DV
    i_s = tl.load(slot_ptr + i_n).to(tl.int64)
    p_s = state_ptr + ((i_s * HV + i_h) * DK + o_k[:, None]) * DV + o_v[None, :]  # [BK, BV]
    m_s = m_k[:, None] & m_v[None, :]
    b_s = tl.load(p_s, mask=m_s, other=0.0)
    for t in range(bos, eos):  # the state stays in registers across the sequence
        b_q = tl.load(q_ptr + t * stride_qt + i_hk * stride_qh + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_k = tl.load(k_ptr + t * stride_kt + i_hk * stride_kh + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, axis=0) + 1e-6) * scale
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
        b_v = tl.load(v_ptr + t * stride_vt + i_h * stride_vh + o_v, mask=m_v, other=0.0).to(tl.float32)
        b_g = tl.load(g_ptr + t * stride_gt + i_h).to(tl.float32)
        b_beta = tl.load(beta_ptr + t * stride_betat + i_h).to(tl.float32)
        b_s = b_s * tl.exp(b_g)
        b_d = (b_v - tl.sum(b_s * b_k[:, None], axis=0)) * b_beta
        b_s = b_s + b_k[:, None] * b_d[None, :]
        b_o = tl.sum(b_s * b_q[:, None], axis=0)
        tl.store(o_ptr + t * stride_ot + i_h * stride_oh + o_v, round_bf16(b_o).to(o_ptr.dtype.element_ty), mask=m_v)
    tl.store(p_s, b_s, mask=m_s)


def causal_conv1d_prefill_triton(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    cu_seqlens: torch.Tensor,
    slots: torch.Tensor,
    *,
    block_c: int = 128,
    num_warps: int = 4,
) -> torch.Tensor:
    """Triton twin of ``causal_conv1d_prefill_ref``: x bf16 [T, C] → y bf16 [T, C], conv_state updated."""
    t_count, c_dim = x.shape
    y = new_empty(x.shape, x.dtype, x.device)
    n_seq = slots.shape[0]
    if n_seq == 0:
        return y
    if x.stride(-1) != 1:
        x = x.contiguous()
    grid = (n_seq, triton.cdiv(c_dim, block_c))
    _conv_prefill_kernel[grid](
        x, conv_state, weight, cu_seqlens, slots, y,
        c_dim, x.stride(0), conv_state.stride(0), conv_state.stride(1), weight.stride(0), y.stride(0),
        W=weight.shape[1], BLOCK_C=block_c, num_warps=num_warps,
    )
    return y


def gdn_recurrent_prefill_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    slots: torch.Tensor,
    *,
    block_v: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """The gated delta rule token by token over packed sequences, the state held in registers.

    Same contract as ``kernels.gdn_chunk_prefill`` (q, k bf16 [T, HK, Dk]; v bf16 [T, HV, Dv];
    g, beta fp32 [T, HV]; state fp32 [S, HV, Dk, Dv] contiguous). One program per (v block,
    v head, sequence) walks its sequence serially: no tensor cores, so it suits short prompts
    and is exact against ``gdn_recurrent_step`` by construction.
    """
    t_count, hk, dk = q.shape
    hv, dv = v.shape[1], v.shape[2]
    o = new_empty((t_count, hv, dv), v.dtype, v.device)
    n_seq = slots.shape[0]
    if n_seq == 0 or t_count == 0:
        return o
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    g, beta = g.to(torch.float32), beta.to(torch.float32)
    block_v = min(block_v, triton.next_power_of_2(dv))
    grid = (triton.cdiv(dv, block_v), hv, n_seq)
    _gdn_prefill_kernel[grid](
        q, k, v, g, beta, state, cu_seqlens, slots, o,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        g.stride(0), beta.stride(0), o.stride(0), o.stride(1),
        hv, dk, dv, dk**-0.5,
        GROUP=hv // hk, BLOCK_K=triton.next_power_of_2(dk), BLOCK_V=block_v, num_warps=num_warps,
    )
    return o

"""``gdn_recurrent_step`` (and ``_gated``): one decode step of the gated delta rule.

References: ``reference.gdn_recurrent_step_ref`` and ``reference.gdn_recurrent_step_gated_ref``.
Program (v block, v head, sequence): loads q, k of the head's qk head (whole Dk), its
[Dk, BLOCK_V] slice of the fp32 state, updates it in registers and writes it back. The
state read + write (2 · HV · Dk · Dv · 4 bytes per sequence) is all the traffic there is.
The gated form reads the raw gate inputs a, b instead of g, β and computes these per program
(a few scalar ops), which saves the ~8 element-wise torch kernels that would compute them.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import new_empty, round_bf16


@triton.jit
def _softplus(x):
    """torch ``F.softplus`` (beta 1, threshold 20): x above 20, else log1p(exp(x)) in fp32.

    log1p by Goldberg's trick (``log(u) · e / (u − 1)``, u = 1 + e rounded), accurate for tiny e
    where ``log(1 + e)`` would return 0; x is clamped before exp so no branch sees inf/NaN.
    """
    e = tl.exp(tl.minimum(x, 20.0))
    u = 1.0 + e
    d = u - 1.0
    lp = tl.where(d == 0.0, e, tl.log(u) * (e / tl.where(d == 0.0, 1.0, d)))
    return tl.where(x > 20.0, x, lp)


@triton.jit
def _gdn_step_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, alog_ptr, dtb_ptr, state_ptr, slot_ptr, o_ptr,
    stride_qb, stride_qh, stride_kb, stride_kh, stride_vb, stride_vh,
    stride_gb, stride_betab, stride_ob, stride_oh,
    HV, DK, DV, scale,
    GATED: tl.constexpr, GROUP: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_b = tl.program_id(2).to(tl.int64)
    i_hk = i_h // GROUP  # each qk head serves GROUP consecutive v heads
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < DK
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    m_v = o_v < DV
    b_q = tl.load(q_ptr + i_b * stride_qb + i_hk * stride_qh + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + i_b * stride_kb + i_hk * stride_kh + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, axis=0) + 1e-6) * scale
    b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
    b_v = tl.load(v_ptr + i_b * stride_vb + i_h * stride_vh + o_v, mask=m_v, other=0.0).to(tl.float32)
    b_g = tl.load(g_ptr + i_b * stride_gb + i_h).to(tl.float32)
    b_beta = tl.load(beta_ptr + i_b * stride_betab + i_h).to(tl.float32)
    if GATED:  # g_ptr, beta_ptr hold the raw inputs a, b: g = −exp(A_log)·softplus(a + dt_bias), β = σ(b)
        b_a = b_g + tl.load(dtb_ptr + i_h).to(tl.float32)
        b_g = -tl.exp(tl.load(alog_ptr + i_h).to(tl.float32)) * _softplus(b_a)
        b_beta = tl.sigmoid(b_beta)
    i_s = tl.load(slot_ptr + i_b).to(tl.int64)
    p_s = state_ptr + ((i_s * HV + i_h) * DK + o_k[:, None]) * DV + o_v[None, :]  # [BK, BV]
    m_s = m_k[:, None] & m_v[None, :]
    b_s = tl.load(p_s, mask=m_s, other=0.0) * tl.exp(b_g)
    b_d = (b_v - tl.sum(b_s * b_k[:, None], axis=0)) * b_beta  # δ = β(v − Sᵀk)
    b_s = b_s + b_k[:, None] * b_d[None, :]
    b_o = tl.sum(b_s * b_q[:, None], axis=0)
    tl.store(p_s, b_s, mask=m_s)
    tl.store(o_ptr + i_b * stride_ob + i_h * stride_oh + o_v, round_bf16(b_o).to(o_ptr.dtype.element_ty), mask=m_v)


def gdn_recurrent_step_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    slots: torch.Tensor,
    *,
    block_v: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Triton twin of ``reference.gdn_recurrent_step_ref``; shapes as in ``kernels.gdn_recurrent_step``.

    q, k, v need a contiguous last dim, state must be contiguous. block_v: a power of two.
    """
    g, beta = g.to(torch.float32), beta.to(torch.float32)
    return _launch(q, k, v, g, beta, None, state, slots, block_v, num_warps)


def gdn_recurrent_step_gated_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    slots: torch.Tensor,
    *,
    block_v: int = 32,
    num_warps: int = 4,
) -> torch.Tensor:
    """Triton twin of ``reference.gdn_recurrent_step_gated_ref``; shapes as in ``kernels.gdn_recurrent_step_gated``.

    a, b [B, HV] with a contiguous last dim (rows may be strided: column slices of in_proj's
    output); A_log, dt_bias [HV] contiguous. Other requirements as ``gdn_recurrent_step_triton``.
    """
    return _launch(q, k, v, a, b, (A_log, dt_bias), state, slots, block_v, num_warps)


def _launch(q, k, v, g, beta, gate, state, slots, block_v, num_warps) -> torch.Tensor:
    """Launch ``_gdn_step_kernel``; ``gate`` = (A_log, dt_bias) when g, beta are the raw a, b."""
    b_count, hk, dk = q.shape
    hv, dv = v.shape[1], v.shape[2]
    o = new_empty((b_count, hv, dv), v.dtype, v.device)
    if b_count == 0:
        return o
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    alog, dtb = gate if gate is not None else (g, g)  # unused pointers when not gated
    block_v = min(block_v, triton.next_power_of_2(dv))
    grid = (triton.cdiv(dv, block_v), hv, b_count)
    _gdn_step_kernel[grid](
        q, k, v, g, beta, alog, dtb, state, slots, o,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        g.stride(0), beta.stride(0), o.stride(0), o.stride(1),
        hv, dk, dv, dk**-0.5,
        GATED=gate is not None, GROUP=hv // hk, BLOCK_K=triton.next_power_of_2(dk), BLOCK_V=block_v,
        num_warps=num_warps,
    )
    return o

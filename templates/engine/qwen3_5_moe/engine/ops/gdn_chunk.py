"""Chunked gated delta rule over packed sequences (varlen GDN prefill), gates fused in.

Math (per v head h, qk head h // (HV/HK)): ``beta = sigmoid(b)``, ``g = -exp(A_log)·softplus(a + dt_bias)``
(fp32, torch softplus threshold 20); q, k L2-normalised, q × Dk^-0.5; per token
``S ← S·exp(g); δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq`` with the fp32 state S [Dk, Dv] read from and
written back to ``state[slots[i]]``. Computed in chunks of BT = 64 tokens (the WY/UT form that
flash-linear-attention's ``chunk_gated_delta_rule`` uses): with gc the in-chunk cumulative g and
``A[i,j] = β_i (k_i·k_j) exp(gc_i − gc_j)`` (j < i), ``X = (I + A)^-1``, ``u = X (β v)``,
``w = X (β exp(gc) k)``; then chunk after chunk ``v' = u − w S``, ``o = exp(gc) q S + (qkᵀ ∘ decay, causal) v'``,
``S ← exp(gc_last) S + (exp(gc_last − gc) k)ᵀ v'``.

Kernels (all read cu_seqlens on the device: no host sync, graph-capturable):
1. ``_gdn_prep_kernel`` (chunk, v head): gates, cumsum, A in 16×16 blocks (from raw bf16 k, its
   L2 norm and β as row scales), X by forward substitution on the diagonal blocks and block
   merging (fp32 "ieee" dots), u, w → fp32 scratch.
2. ``_gdn_state_kernel`` (v block, v head, sequence): the sequential pass over a sequence's chunks;
   writes S at each chunk start (fp32 scratch) and v'.
3. ``_gdn_output_kernel`` (chunk, v head, v block): o, rounded to bf16.
The other dots take fp32 tiles at ``dot_precision`` (tf32 tensor cores by default on GPUs).
Reference: ``gdn_chunk_prefill_ref`` (torch: gates, then ``kernels.reference_prefill.gdn_chunk_prefill_ref``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import kernels
from ..kernels import reference_prefill
from ..kernels._checks import _check_varlen, check_gdn_step_gated
from ._triton import HAVE_TRITON, require_triton, tl, triton
from ._varlen import block_base, block_n, locate_block, max_blocks

if HAVE_TRITON:
    from ..kernels._common import INTERPRET, dot_bf16, new_empty, round_bf16
    from ..kernels.gdn import _softplus

#: Launch defaults (tunable through the keywords of ``gdn_chunk_prefill``).
DEFAULTS = {"block_v": 128, "state_block_v": 32, "num_warps": 8, "state_num_warps": 8, "state_num_stages": 2,
            "prep_num_warps": 4}  # H200, one layer at 8192 tokens: 1.62 ms with 4 prep warps, 1.96 ms with 8
BT = 64  # chunk size of the Triton path (the UT transform is written for 4 blocks of 16)


# ---------------------------------------------------------------- reference
def gdn_chunk_prefill_ref(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, cu_seqlens: torch.Tensor,
    slots: torch.Tensor, chunk_size: int = 64,
) -> torch.Tensor:
    """Plain torch: the gates (HF's formulas, fp32), then the chunked delta rule of
    ``reference_prefill.gdn_chunk_prefill_ref`` (loops over sequences and chunks, syncs on cu_seqlens)."""
    beta = torch.sigmoid(b.float())
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())
    return reference_prefill.gdn_chunk_prefill_ref(q, k, v, g, beta, state, cu_seqlens, slots, chunk_size)


# ---------------------------------------------------------------- kernels
@triton.jit
def _load_unit(p, o_r, m_r, stride_t, o_d, m_d, SCALE):
    """Rows o_r of a [T, D] head slice (bf16) → fp32, each row L2-normalised (× SCALE)."""
    b_x = tl.load(p + o_r[:, None] * stride_t + o_d[None, :], mask=m_r[:, None] & m_d[None, :], other=0.0).to(tl.float32)
    return b_x * (tl.rsqrt(tl.sum(b_x * b_x, axis=1) + 1e-6) * SCALE)[:, None]


@triton.jit
def _gates(a_ptr, b_ptr, o_r, m_r, stride_a, stride_b, b_alog, b_dtb):
    """g (log decay ≤ 0) and beta fp32 [16] of rows o_r (0 outside m_r)."""
    b_a = tl.load(a_ptr + o_r * stride_a, mask=m_r, other=0.0).to(tl.float32)
    b_b = tl.load(b_ptr + o_r * stride_b, mask=m_r, other=0.0).to(tl.float32)
    b_g = tl.where(m_r, -tl.exp(b_alog) * _softplus(b_a + b_dtb), 0.0)
    return b_g, tl.where(m_r, tl.sigmoid(b_b), 0.0)


@triton.jit
def _load_raw(p, o_r, m_r, stride_t, o_d, m_d):
    """Rows o_r of a [T, D] head slice as stored (bf16) and each row's 1/‖row‖ (fp32, HF's l2norm)."""
    b_x = tl.load(p + o_r[:, None] * stride_t + o_d[None, :], mask=m_r[:, None] & m_d[None, :], other=0.0)
    b_f = b_x.to(tl.float32)
    return b_x, tl.rsqrt(tl.sum(b_f * b_f, axis=1) + 1e-6)


@triton.jit
def _a_block(b_ki, b_kj, b_si, b_sj, b_gi, b_gj, DIAG: tl.constexpr):
    """A block [16, 16]: s_i s_j (k_i·k_j) exp(gc_i − gc_j) from raw bf16 rows (products exact in fp32),
    strictly lower on a diagonal block."""
    b_a = dot_bf16(b_ki, tl.trans(b_kj), tl.zeros([16, 16], dtype=tl.float32)) * b_si[:, None] * b_sj[None, :]
    b_d = b_gi[:, None] - b_gj[None, :]
    if DIAG:
        o_r = tl.arange(0, 16)
        keep = o_r[:, None] > o_r[None, :]
        return tl.where(keep, b_a * tl.exp(tl.where(keep, b_d, 0.0)), 0.0)
    else:
        return b_a * tl.exp(b_d)


@triton.jit
def _xk(b_x, b_c, b_k, PREC: tl.constexpr):
    """X diag(c) K for X [16, 16] fp32, c [16], K [16, D] bf16 → fp32 [16, D]."""
    return tl.dot(b_x * b_c[None, :], b_k.to(tl.float32), input_precision=PREC)


@triton.jit
def _inv_unit_lower(b_a):
    """(I + A)^-1 for a strictly lower 16×16 A, by forward substitution (row i = e_i − Σ_j<i A_ij X_j)."""
    o_r = tl.arange(0, 16)
    b_x = tl.where(o_r[:, None] == o_r[None, :], 1.0, 0.0)
    for i in range(1, 16):
        b_ai = tl.sum(tl.where(o_r[:, None] == i, b_a, 0.0), 0)  # row i of A
        b_row = tl.where(o_r == i, 1.0, 0.0) - tl.sum(b_ai[:, None] * b_x, 0)
        b_x = tl.where(o_r[:, None] == i, b_row[None, :], b_x)
    return b_x


@triton.jit
def _dot16(x, y):
    return tl.dot(x, y, input_precision="ieee")


@triton.jit
def _store_rows(p, b_x, o_r, m_r, stride_t, o_d, m_d):
    tl.store(p + o_r[:, None] * stride_t + o_d[None, :], b_x, mask=m_r[:, None] & m_d[None, :])


@triton.jit
def _gdn_prep_kernel(
    k_ptr, v_ptr, a_ptr, b_ptr, alog_ptr, dtb_ptr, cu_ptr, u_ptr, w_ptr, gc_ptr,
    N, HV, DK, DV, stride_kt, stride_kh, stride_vt, stride_vh, stride_a, stride_b,
    GROUP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):
    i_c = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n, bos, eos, t0 = locate_block(cu_ptr, N, i_c, 64, BLOCK_N)
    o_k = tl.arange(0, BK)
    m_k = o_k < DK
    o_v = tl.arange(0, BV)
    m_v = o_v < DV
    r0 = t0 + tl.arange(0, 16)
    r1, r2, r3 = r0 + 16, r0 + 32, r0 + 48
    m0, m1, m2, m3 = r0 < eos, r1 < eos, r2 < eos, r3 < eos
    b_alog = tl.load(alog_ptr + i_h).to(tl.float32)
    b_dtb = tl.load(dtb_ptr + i_h).to(tl.float32)
    g0, be0 = _gates(a_ptr + i_h, b_ptr + i_h, r0, m0, stride_a, stride_b, b_alog, b_dtb)
    g1, be1 = _gates(a_ptr + i_h, b_ptr + i_h, r1, m1, stride_a, stride_b, b_alog, b_dtb)
    g2, be2 = _gates(a_ptr + i_h, b_ptr + i_h, r2, m2, stride_a, stride_b, b_alog, b_dtb)
    g3, be3 = _gates(a_ptr + i_h, b_ptr + i_h, r3, m3, stride_a, stride_b, b_alog, b_dtb)
    s0, s1, s2 = tl.sum(g0, 0), tl.sum(g1, 0), tl.sum(g2, 0)  # in-chunk cumulative g, block by block
    g0 = tl.cumsum(g0, 0)
    g1 = tl.cumsum(g1, 0) + s0
    g2 = tl.cumsum(g2, 0) + (s0 + s1)
    g3 = tl.cumsum(g3, 0) + (s0 + s1 + s2)
    p_gc = gc_ptr + i_h
    tl.store(p_gc + r0 * HV, g0, mask=m0)
    tl.store(p_gc + r1 * HV, g1, mask=m1)
    tl.store(p_gc + r2 * HV, g2, mask=m2)
    tl.store(p_gc + r3 * HV, g3, mask=m3)
    # k stays bf16 (raw); its L2 norm and β enter as row scales: A_st = diag(β rn)_s (k_s k_tᵀ) diag(rn)_t ∘ decay
    p_k = k_ptr + (i_h // GROUP) * stride_kh
    k0, n0 = _load_raw(p_k, r0, m0, stride_kt, o_k, m_k)
    k1, n1 = _load_raw(p_k, r1, m1, stride_kt, o_k, m_k)
    k2, n2 = _load_raw(p_k, r2, m2, stride_kt, o_k, m_k)
    k3, n3 = _load_raw(p_k, r3, m3, stride_kt, o_k, m_k)
    # diagonal blocks inverted, then X_ij = -X_ii Σ_{j≤m<i} A_im X_mj
    x00 = _inv_unit_lower(_a_block(k0, k0, n0 * be0, n0, g0, g0, True))
    x11 = _inv_unit_lower(_a_block(k1, k1, n1 * be1, n1, g1, g1, True))
    x22 = _inv_unit_lower(_a_block(k2, k2, n2 * be2, n2, g2, g2, True))
    x33 = _inv_unit_lower(_a_block(k3, k3, n3 * be3, n3, g3, g3, True))
    a10 = _a_block(k1, k0, n1 * be1, n0, g1, g0, False)
    a20 = _a_block(k2, k0, n2 * be2, n0, g2, g0, False)
    a21 = _a_block(k2, k1, n2 * be2, n1, g2, g1, False)
    a30 = _a_block(k3, k0, n3 * be3, n0, g3, g0, False)
    a31 = _a_block(k3, k1, n3 * be3, n1, g3, g1, False)
    a32 = _a_block(k3, k2, n3 * be3, n2, g3, g2, False)
    x10 = -_dot16(x11, _dot16(a10, x00))
    x21 = -_dot16(x22, _dot16(a21, x11))
    x20 = -_dot16(x22, _dot16(a20, x00) + _dot16(a21, x10))
    x32 = -_dot16(x33, _dot16(a32, x22))
    x31 = -_dot16(x33, _dot16(a31, x11) + _dot16(a32, x21))
    x30 = -_dot16(x33, _dot16(a30, x00) + _dot16(a31, x10) + _dot16(a32, x20))
    # w = X diag(β rn exp(gc)) k: the row scales go onto X's columns, k is read as is
    c0, c1, c2, c3 = n0 * be0 * tl.exp(g0), n1 * be1 * tl.exp(g1), n2 * be2 * tl.exp(g2), n3 * be3 * tl.exp(g3)
    p_w = w_ptr + i_h * DK
    s_w = HV * DK
    _store_rows(p_w, _xk(x00, c0, k0, PREC), r0, m0, s_w, o_k, m_k)
    _store_rows(p_w, _xk(x10, c0, k0, PREC) + _xk(x11, c1, k1, PREC), r1, m1, s_w, o_k, m_k)
    _store_rows(p_w, _xk(x20, c0, k0, PREC) + _xk(x21, c1, k1, PREC) + _xk(x22, c2, k2, PREC), r2, m2, s_w, o_k, m_k)
    w3 = _xk(x30, c0, k0, PREC) + _xk(x31, c1, k1, PREC) + _xk(x32, c2, k2, PREC) + _xk(x33, c3, k3, PREC)
    _store_rows(p_w, w3, r3, m3, s_w, o_k, m_k)
    # u = X diag(β) v, v read block by block
    p_v = v_ptr + i_h * stride_vh
    p_u = u_ptr + i_h * DV
    s_u = HV * DV
    v0, _ = _load_raw(p_v, r0, m0, stride_vt, o_v, m_v)
    u0, u1, u2, u3 = _xk(x00, be0, v0, PREC), _xk(x10, be0, v0, PREC), _xk(x20, be0, v0, PREC), _xk(x30, be0, v0, PREC)
    _store_rows(p_u, u0, r0, m0, s_u, o_v, m_v)
    v1, _ = _load_raw(p_v, r1, m1, stride_vt, o_v, m_v)
    u1, u2, u3 = u1 + _xk(x11, be1, v1, PREC), u2 + _xk(x21, be1, v1, PREC), u3 + _xk(x31, be1, v1, PREC)
    _store_rows(p_u, u1, r1, m1, s_u, o_v, m_v)
    v2, _ = _load_raw(p_v, r2, m2, stride_vt, o_v, m_v)
    u2, u3 = u2 + _xk(x22, be2, v2, PREC), u3 + _xk(x32, be2, v2, PREC)
    _store_rows(p_u, u2, r2, m2, s_u, o_v, m_v)
    v3, _ = _load_raw(p_v, r3, m3, stride_vt, o_v, m_v)
    _store_rows(p_u, u3 + _xk(x33, be3, v3, PREC), r3, m3, s_u, o_v, m_v)


@triton.jit
def _gdn_state_kernel(
    k_ptr, u_ptr, w_ptr, gc_ptr, state_ptr, cu_ptr, slot_ptr, h_ptr, vn_ptr,
    N, HV, DK, DV, stride_kt, stride_kh,
    GROUP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n = tl.program_id(2)
    bos = tl.load(cu_ptr + i_n).to(tl.int64)
    eos = tl.load(cu_ptr + i_n + 1).to(tl.int64)
    base = block_base(cu_ptr, N, i_n, 64, BLOCK_N)
    o_k = tl.arange(0, BK)
    m_k = o_k < DK
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < DV
    o_t = tl.arange(0, 64)
    m_s = m_k[:, None] & m_v[None, :]
    i_s = tl.load(slot_ptr + i_n).to(tl.int64)
    p_s = state_ptr + ((i_s * HV + i_h) * DK + o_k[:, None]) * DV + o_v[None, :]
    b_h = tl.load(p_s, mask=m_s, other=0.0)
    p_k = k_ptr + (i_h // GROUP) * stride_kh
    for i_c in range(0, tl.cdiv(eos - bos, 64)):
        r = bos + i_c * 64 + o_t
        m_r = r < eos
        p_h = h_ptr + (((base + i_c) * HV + i_h) * DK + o_k[:, None]) * DV + o_v[None, :]
        tl.store(p_h, b_h, mask=m_s)
        b_w = tl.load(w_ptr + (r[:, None] * HV + i_h) * DK + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0.0)
        b_u = tl.load(u_ptr + (r[:, None] * HV + i_h) * DV + o_v[None, :], mask=m_r[:, None] & m_v[None, :], other=0.0)
        b_vn = b_u - tl.dot(b_w, b_h, input_precision=PREC)
        tl.store(vn_ptr + (r[:, None] * HV + i_h) * DV + o_v[None, :], b_vn, mask=m_r[:, None] & m_v[None, :])
        b_gc = tl.load(gc_ptr + r * HV + i_h, mask=m_r, other=0.0)
        b_glast = tl.load(gc_ptr + (tl.minimum(bos + i_c * 64 + 64, eos) - 1) * HV + i_h)
        b_kr, b_rn = _load_raw(p_k, r, m_r, stride_kt, o_k, m_k)  # (k/‖k‖ · decay)ᵀ v' = k_rawᵀ (row-scaled v')
        b_vs = b_vn * (b_rn * tl.exp(b_glast - b_gc))[:, None]
        b_h = b_h * tl.exp(b_glast) + tl.dot(tl.trans(b_kr.to(tl.float32)), b_vs, input_precision=PREC)
    tl.store(p_s, b_h, mask=m_s)


@triton.jit
def _gdn_output_kernel(
    q_ptr, k_ptr, gc_ptr, h_ptr, vn_ptr, cu_ptr, o_ptr,
    N, HV, DK, DV, stride_qt, stride_qh, stride_kt, stride_kh, stride_ot, stride_oh, scale,
    GROUP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr,
):
    i_c = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_v = tl.program_id(2)
    i_n, bos, eos, t0 = locate_block(cu_ptr, N, i_c, 64, BLOCK_N)
    o_k = tl.arange(0, BK)
    m_k = o_k < DK
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < DV
    o_t = tl.arange(0, 64)
    r = t0 + o_t
    m_r = r < eos
    i_hk = i_h // GROUP
    b_q = _load_unit(q_ptr + i_hk * stride_qh, r, m_r, stride_qt, o_k, m_k, scale)
    b_k = _load_unit(k_ptr + i_hk * stride_kh, r, m_r, stride_kt, o_k, m_k, 1.0)
    b_gc = tl.load(gc_ptr + r * HV + i_h, mask=m_r, other=0.0)
    m_h = m_k[:, None] & m_v[None, :] & ((o_k[:, None] * 0 + t0) < eos)  # a scalar mask is not portable
    b_h = tl.load(h_ptr + ((i_c * HV + i_h) * DK + o_k[:, None]) * DV + o_v[None, :], mask=m_h, other=0.0)
    b_o = tl.dot(b_q * tl.exp(b_gc)[:, None], b_h, input_precision=PREC)
    causal = o_t[:, None] >= o_t[None, :]
    b_s = tl.dot(b_q, tl.trans(b_k), input_precision=PREC)
    b_s = tl.where(causal, b_s * tl.exp(tl.where(causal, b_gc[:, None] - b_gc[None, :], 0.0)), 0.0)
    b_vn = tl.load(vn_ptr + (r[:, None] * HV + i_h) * DV + o_v[None, :], mask=m_r[:, None] & m_v[None, :], other=0.0)
    b_o += tl.dot(b_s, b_vn, input_precision=PREC)
    p_o = o_ptr + r[:, None] * stride_ot + i_h * stride_oh + o_v[None, :]
    tl.store(p_o, round_bf16(b_o).to(o_ptr.dtype.element_ty), mask=m_r[:, None] & m_v[None, :])


# ---------------------------------------------------------------- launcher
def gdn_chunk_prefill_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, cu_seqlens: torch.Tensor,
    slots: torch.Tensor, *, block_v: int = DEFAULTS["block_v"], state_block_v: int = DEFAULTS["state_block_v"],
    num_warps: int = DEFAULTS["num_warps"], state_num_warps: int = DEFAULTS["state_num_warps"],
    state_num_stages: int = DEFAULTS["state_num_stages"],
    prep_num_warps: int = DEFAULTS["prep_num_warps"], dot_precision: str | None = None,
) -> torch.Tensor:
    """Three launches; scratch: u, v' fp32 [T, HV, Dv], w fp32 [T, HV, Dk], gc fp32 [T, HV],
    per-chunk states fp32 [T/64 + N, HV, Dk, Dv]. Grids are sized from T and N alone. Dots on fp32
    tiles run as ``dot_precision`` (tf32 tensor cores by default; the 16×16 inverse always ieee)."""
    require_triton("gdn_chunk_prefill")
    t_count, hk, dk = q.shape
    hv, dv = v.shape[1], v.shape[2]
    n_seq = slots.shape[0]
    o = new_empty((t_count, hv, dv), v.dtype, v.device)
    if t_count == 0 or n_seq == 0:
        return o
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    a, b = (t if t.stride(-1) == 1 else t.contiguous() for t in (a, b))
    dev = v.device
    max_chunks = max_blocks(t_count, n_seq, BT)
    u = new_empty((t_count, hv, dv), torch.float32, dev)
    w = new_empty((t_count, hv, dk), torch.float32, dev)
    vn = new_empty((t_count, hv, dv), torch.float32, dev)
    gc = new_empty((t_count, hv), torch.float32, dev)
    h = new_empty((max_chunks, hv, dk, dv), torch.float32, dev)
    bk, bv_full = max(16, triton.next_power_of_2(dk)), max(16, triton.next_power_of_2(dv))
    block_v = max(16, min(block_v, bv_full))
    state_block_v = max(16, min(state_block_v, bv_full))
    bn = block_n(n_seq)
    prec = dot_precision or ("ieee" if INTERPRET else "tf32")
    group = hv // hk
    _gdn_prep_kernel[(max_chunks, hv)](
        k, v, a, b, A_log, dt_bias, cu_seqlens, u, w, gc,
        n_seq, hv, dk, dv, k.stride(0), k.stride(1), v.stride(0), v.stride(1), a.stride(0), b.stride(0),
        GROUP=group, BK=bk, BV=bv_full, BLOCK_N=bn, PREC=prec, num_warps=prep_num_warps,
    )
    _gdn_state_kernel[(triton.cdiv(dv, state_block_v), hv, n_seq)](
        k, u, w, gc, state, cu_seqlens, slots, h, vn,
        n_seq, hv, dk, dv, k.stride(0), k.stride(1),
        GROUP=group, BK=bk, BV=state_block_v, BLOCK_N=bn, PREC=prec, num_warps=state_num_warps,
        num_stages=state_num_stages,
    )
    _gdn_output_kernel[(max_chunks, hv, triton.cdiv(dv, block_v))](
        q, k, gc, h, vn, cu_seqlens, o,
        n_seq, hv, dk, dv, q.stride(0), q.stride(1), k.stride(0), k.stride(1), o.stride(0), o.stride(1), dk**-0.5,
        GROUP=group, BK=bk, BV=block_v, BLOCK_N=bn, PREC=prec, num_warps=num_warps,
    )
    return o


# ---------------------------------------------------------------- public op
def gdn_chunk_prefill(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
    A_log: torch.Tensor, dt_bias: torch.Tensor, state: torch.Tensor, cu_seqlens: torch.Tensor,
    slots: torch.Tensor, *, chunk_size: int = 64, **launch,
) -> torch.Tensor:
    """Gated delta rule over packed sequences, continuing from ``state[slots]``, gates computed inside.

    Args:
        q, k: bf16 [T, HK, Dk]; v: bf16 [T, HV, Dv] (last dims contiguous, rows may be strided:
            views of the conv1d output); a, b: bf16 [T, HV], in_proj's raw outputs (rows may be
            strided); A_log, dt_bias: fp32 [HV]; state: fp32 [S, HV, Dk, Dv] contiguous (zero a new
            sequence's row first); cu_seqlens: int [N+1] (cu[0] = 0, cu[N] = T, read on the device);
            slots: int [N], distinct; chunk_size: the reference's chunk (the kernel's is 64; any
            size gives the same result up to fp32 rounding).
    Returns: o bf16 [T, HV, Dv]; each sequence's final state is written to its slot.
    Launch keywords (Triton, DEFAULTS): ``block_v``/``num_warps`` (output kernel), ``state_block_v``/
    ``state_num_warps``/``state_num_stages`` (the sequential pass: fewer v columns per program, more programs),
    ``prep_num_warps``; ``dot_precision`` ("tf32" on GPUs by default, "ieee" for fp32-exact dots).
    Backend: Triton when ``kernels`` picks it for "gdn_chunk" (its name in ``kernels.REFERENCE_OPS``;
    CUDA tensors by default), else ``gdn_chunk_prefill_ref``.
    Raises: ValueError on shape/dtype mismatch (naming the argument).
    """
    check_gdn_step_gated(q, k, v, a, b, A_log, dt_bias, state, slots.new_zeros(q.shape[0]))
    _check_varlen("gdn_chunk_prefill", q.shape[0], cu_seqlens, slots)
    if kernels._use_triton(q, "gdn_chunk"):
        return gdn_chunk_prefill_triton(q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, slots, **launch)
    return gdn_chunk_prefill_ref(q, k, v, a, b, A_log, dt_bias, state, cu_seqlens, slots, chunk_size)

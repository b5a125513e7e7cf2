"""W4A16 NVFP4 matmul kernels shared by ``nvfp4_linear`` and ``moe_nvfp4``.

Weights are NVFP4 (uint8 [E, N, K/2] codes, e4m3 [E, N, K/16] block scales, fp32 global per
expert); activations bf16; fp32 accumulation. The codes are unpacked in registers
(``_common.e2m1_scaled``), the block scale is applied per 16-element group and the global
scale once on the fp32 accumulator, so the bf16 weight tile fed to ``tl.dot`` is exact
(an E2M1 value times an e4m3 value has at most 6 significant bits). Element 2j of a row
sits in the low nibble, 2j+1 in the high one, so the activation row is split into its even
and odd elements instead of interleaving the weight nibbles.

Two kernels:
- ``nvfp4_gemv_kernel``: one output row per program column; for tiny M (decode), bandwidth bound.
- ``nvfp4_gemm_kernel``: tiles of BLOCK_M rows with ``tl.dot``; rows optionally gathered
  through a sorted (token, expert) list, one expert per row block (vLLM ``fused_moe`` layout).

Both take ``GATED`` (the row n of the output needs weight rows n (gate) and N + n (up), and
stores ``silu(gate) * up``) and ``ROUTED`` (the output row is multiplied by its routing weight).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._common import E2M1_UNSCALE, dot_bf16, e2m1_scaled, e2m1_word_pair, round_bf16


@triton.jit
def _gemv_rows(p_a, p_w, p_s, m_n, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """sum_k a[k] · W[n, k] for the rows of p_w/p_s ([BLOCK_N, 1] pointers), without the global scale."""
    o_b = tl.arange(0, BLOCK_K // 2)
    o_g = tl.arange(0, BLOCK_K // 16)
    o_k = tl.arange(0, BLOCK_K)
    b_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        b_a = tl.load(p_a + k0 + o_k, mask=(k0 + o_k) < K, other=0.0).to(tl.float32)
        b_ae, b_ao = tl.split(tl.reshape(b_a, [BLOCK_K // 2, 2]))  # elements 2j, 2j+1
        m_b = m_n[:, None] & ((k0 // 2 + o_b) < K // 2)[None, :]
        b_p = tl.load(p_w + k0 // 2 + o_b[None, :], mask=m_b, other=0).to(tl.int32)  # [BN, BK/2]
        b_prod = e2m1_scaled(b_p & 15) * b_ae[None, :] + e2m1_scaled(b_p >> 4) * b_ao[None, :]
        b_grp = tl.sum(tl.reshape(b_prod, [BLOCK_N, BLOCK_K // 16, 8]), axis=2)  # per 16-element group
        m_g = m_n[:, None] & ((k0 // 16 + o_g) < K // 16)[None, :]
        b_s = tl.load(p_s + k0 // 16 + o_g[None, :], mask=m_g, other=0.0).to(tl.float32)
        b_acc += tl.sum(b_grp * b_s, axis=1)
    return b_acc * E2M1_UNSCALE


@triton.jit
def _split8(a, BLOCK_K: tl.constexpr):
    """a [BLOCK_K] → its elements 8w + j, j = 0..7, as eight [BLOCK_K/8] tensors."""
    a = tl.reshape(a, [BLOCK_K // 8, 2, 2, 2])  # (w, j // 4, (j // 2) % 2, j % 2)
    e, o = tl.split(a)
    e0, e1 = tl.split(e)  # j % 2 == 0: j // 2 % 2 = 0 -> j in {0, 4}; = 1 -> j in {2, 6}
    o0, o1 = tl.split(o)
    a0, a4 = tl.split(e0)
    a2, a6 = tl.split(e1)
    a1, a5 = tl.split(o0)
    a3, a7 = tl.split(o1)
    return a0, a1, a2, a3, a4, a5, a6, a7


@triton.jit
def _gemv_rows_words(p_a, p_w, p_s, m_n, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """``_gemv_rows`` reading the codes as int32 words (8 codes each; p_w: int32 row pointers),
    two codes decoded per integer op (``e2m1_word_pair``). Needs K % 16 == 0 (NVFP4 does)."""
    o_w = tl.arange(0, BLOCK_K // 8)
    o_g = tl.arange(0, BLOCK_K // 16)
    o_k = tl.arange(0, BLOCK_K)
    b_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        b_a = tl.load(p_a + k0 + o_k, mask=(k0 + o_k) < K, other=0.0).to(tl.float32)
        a0, a1, a2, a3, a4, a5, a6, a7 = _split8(b_a, BLOCK_K)
        m_w = m_n[:, None] & ((k0 // 8 + o_w) < K // 8)[None, :]
        b_w = tl.load(p_w + k0 // 8 + o_w[None, :], mask=m_w, other=0)  # [BN, BK/8] int32
        w0, w4 = e2m1_word_pair(b_w, 0)
        w1, w5 = e2m1_word_pair(b_w, 1)
        w2, w6 = e2m1_word_pair(b_w, 2)
        w3, w7 = e2m1_word_pair(b_w, 3)
        b_prod = w0 * a0[None, :] + w1 * a1[None, :] + w2 * a2[None, :] + w3 * a3[None, :]
        b_prod += w4 * a4[None, :] + w5 * a5[None, :] + w6 * a6[None, :] + w7 * a7[None, :]
        b_grp = tl.sum(tl.reshape(b_prod, [BLOCK_N, BLOCK_K // 16, 2]), axis=2)  # per 16-element group
        m_g = m_n[:, None] & ((k0 // 16 + o_g) < K // 16)[None, :]
        b_s = tl.load(p_s + k0 // 16 + o_g[None, :], mask=m_g, other=0.0).to(tl.float32)
        b_acc += tl.sum(b_grp * b_s, axis=1)
    return b_acc * E2M1_UNSCALE


@triton.jit
def _gemv_pair(p_a, p_w, p_s, g_ptr, m_n, N, K, stride_wn, stride_sn,
               GATED: tl.constexpr, WORDS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One (row, expert) pair's output block: W·a times the global scale(s); gated: silu(gate)·up."""
    if WORDS:
        b_acc = _gemv_rows_words(p_a, p_w, p_s, m_n, K, BLOCK_N, BLOCK_K)
    else:
        b_acc = _gemv_rows(p_a, p_w, p_s, m_n, K, BLOCK_N, BLOCK_K)
    b_acc = b_acc * tl.load(g_ptr)
    if GATED:  # up rows follow the N gate rows, with their own global scale
        if WORDS:
            b_up = _gemv_rows_words(p_a, p_w + N * stride_wn, p_s + N * stride_sn, m_n, K, BLOCK_N, BLOCK_K)
        else:
            b_up = _gemv_rows(p_a, p_w + N * stride_wn, p_s + N * stride_sn, m_n, K, BLOCK_N, BLOCK_K)
        b_acc = b_acc * tl.sigmoid(b_acc) * (b_up * tl.load(g_ptr + 1))
    return b_acc


@triton.jit
def nvfp4_gemv_kernel(
    a_ptr, w_ptr, s_ptr, g_ptr, e_ptr, tw_ptr, c_ptr,
    N, K,
    stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_ge, stride_cm,
    A_DIV: tl.constexpr, SUM_K: tl.constexpr, HAS_EXPERT: tl.constexpr, GATED: tl.constexpr,
    ROUTED: tl.constexpr, OUT_BF16: tl.constexpr, WORDS: tl.constexpr, UNROLL: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Grid (cdiv(N, BLOCK_N), R): program (i, r) writes c[r, i*BLOCK_N : (i+1)*BLOCK_N].

    Output row r sums the SUM_K rows p = r*SUM_K + j (1: just p = r); row p reads activation
    row p // A_DIV, expert e_ptr[p] (0 without HAS_EXPERT) and routing weight tw_ptr[p] (ROUTED).
    WORDS: w_ptr is the int32 view of the codes (strides in words). UNROLL: the loop over the
    SUM_K rows is unrolled, so the loads of all k experts can be in flight together.
    """
    i_n = tl.program_id(0)
    i_r = tl.program_id(1).to(tl.int64)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    b_out = tl.zeros([BLOCK_N], dtype=tl.float32)
    if UNROLL:
        for j in tl.static_range(SUM_K):  # fixed order: the same sum whatever the batch
            b_out += _gemv_term(a_ptr, w_ptr, s_ptr, g_ptr, e_ptr, tw_ptr, i_r * SUM_K + j, o_n, m_n, N, K,
                                stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_ge,
                                A_DIV, HAS_EXPERT, GATED, ROUTED, WORDS, BLOCK_N, BLOCK_K)
    else:
        for j in range(SUM_K):
            b_out += _gemv_term(a_ptr, w_ptr, s_ptr, g_ptr, e_ptr, tw_ptr, i_r * SUM_K + j, o_n, m_n, N, K,
                                stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_ge,
                                A_DIV, HAS_EXPERT, GATED, ROUTED, WORDS, BLOCK_N, BLOCK_K)
    if OUT_BF16:
        b_out = round_bf16(b_out)
    tl.store(c_ptr + i_r * stride_cm + o_n, b_out.to(c_ptr.dtype.element_ty), mask=m_n)


@triton.jit
def _gemv_term(a_ptr, w_ptr, s_ptr, g_ptr, e_ptr, tw_ptr, i_p, o_n, m_n, N, K,
               stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_ge,
               A_DIV: tl.constexpr, HAS_EXPERT: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr,
               WORDS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Row p's (weighted) output block of ``nvfp4_gemv_kernel``."""
    i_e = 0
    if HAS_EXPERT:
        i_e = tl.load(e_ptr + i_p).to(tl.int64)
    p_a = a_ptr + (i_p // A_DIV) * stride_am
    p_w = w_ptr + i_e * stride_we + o_n.to(tl.int64)[:, None] * stride_wn
    p_s = s_ptr + i_e * stride_se + o_n.to(tl.int64)[:, None] * stride_sn
    b_acc = _gemv_pair(p_a, p_w, p_s, g_ptr + i_e * stride_ge, m_n, N, K, stride_wn, stride_sn,
                       GATED, WORDS, BLOCK_N, BLOCK_K)
    if ROUTED:
        b_acc = b_acc * tl.load(tw_ptr + i_p).to(tl.float32)
    return b_acc


@triton.jit
def _dot_rows(acc, b_ae, b_ao, p_w, p_s, m_n, k0, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += a[:, k0:k0+BK] @ W[n, k0:k0+BK]^T for the columns n of p_w/p_s ([1, BLOCK_N] pointers)."""
    o_b = tl.arange(0, BLOCK_K // 2)
    o_g = tl.arange(0, BLOCK_K // 16)
    m_b = ((k0 // 2 + o_b) < K // 2)[:, None] & m_n[None, :]
    b_p = tl.load(p_w + k0 // 2 + o_b[:, None], mask=m_b, other=0).to(tl.int32)  # [BK/2, BN]
    m_g = ((k0 // 16 + o_g) < K // 16)[:, None] & m_n[None, :]
    b_s = tl.load(p_s + k0 // 16 + o_g[:, None], mask=m_g, other=0.0).to(tl.float32) * E2M1_UNSCALE
    b_s = b_s[:, None, :]  # [BK/16, 1, BN]: byte j of the tile belongs to group j // 8
    b_lo = tl.reshape(tl.reshape(e2m1_scaled(b_p & 15), [BLOCK_K // 16, 8, BLOCK_N]) * b_s, [BLOCK_K // 2, BLOCK_N])
    b_hi = tl.reshape(tl.reshape(e2m1_scaled(b_p >> 4), [BLOCK_K // 16, 8, BLOCK_N]) * b_s, [BLOCK_K // 2, BLOCK_N])
    acc = dot_bf16(b_ae, b_lo.to(tl.bfloat16), acc)
    acc = dot_bf16(b_ao, b_hi.to(tl.bfloat16), acc)
    return acc


@triton.jit
def nvfp4_gemm_kernel(
    a_ptr, w_ptr, s_ptr, g_ptr, c_ptr, sid_ptr, eid_ptr, tw_ptr,
    M, N, K,
    stride_am, stride_we, stride_wn, stride_se, stride_sn, stride_ge, stride_cm,
    A_DIV: tl.constexpr, SORTED: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr,
    OUT_BF16: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Grid (row blocks, cdiv(N, BLOCK_N)). Output rows r < M; activation row r // A_DIV.

    SORTED: row block i holds rows sid_ptr[i*BLOCK_M : (i+1)*BLOCK_M] (value M = padding), all of
    expert eid_ptr[i] (-1: unused block, nothing to do). Otherwise rows are i*BLOCK_M + arange
    and the expert is 0.
    """
    i_m = tl.program_id(0)
    i_n = tl.program_id(1)
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if SORTED:
        i_e = tl.load(eid_ptr + i_m).to(tl.int64)
        if i_e < 0:
            return
        o_r = tl.load(sid_ptr + o_m).to(tl.int64)
    else:
        i_e = 0
        o_r = o_m.to(tl.int64)
    m_r = o_r < M
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    o_k = tl.arange(0, BLOCK_K)
    p_a = a_ptr + (o_r // A_DIV)[:, None] * stride_am + o_k[None, :]
    p_w = w_ptr + i_e * stride_we + o_n.to(tl.int64)[None, :] * stride_wn
    p_s = s_ptr + i_e * stride_se + o_n.to(tl.int64)[None, :] * stride_sn
    b_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    b_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        b_a = tl.load(p_a + k0, mask=m_r[:, None] & ((k0 + o_k) < K)[None, :], other=0.0)
        b_ae, b_ao = tl.split(tl.reshape(b_a, [BLOCK_M, BLOCK_K // 2, 2]))  # [BM, BK/2] each
        b_acc = _dot_rows(b_acc, b_ae, b_ao, p_w, p_s, m_n, k0, K, BLOCK_N, BLOCK_K)
        if GATED:
            b_up = _dot_rows(b_up, b_ae, b_ao, p_w + N * stride_wn, p_s + N * stride_sn, m_n, k0, K, BLOCK_N, BLOCK_K)
    b_acc = b_acc * tl.load(g_ptr + i_e * stride_ge)
    if GATED:
        b_up = b_up * tl.load(g_ptr + i_e * stride_ge + 1)
        b_acc = b_acc * tl.sigmoid(b_acc) * b_up
    if ROUTED:
        b_acc = b_acc * tl.load(tw_ptr + o_r, mask=m_r, other=0.0).to(tl.float32)[:, None]
    if OUT_BF16:
        b_acc = round_bf16(b_acc)
    p_c = c_ptr + o_r[:, None] * stride_cm + o_n[None, :]
    tl.store(p_c, b_acc.to(c_ptr.dtype.element_ty), mask=m_r[:, None] & m_n[None, :])

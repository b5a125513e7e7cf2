"""The grouped W4A16 GEMM of the MoE (both projections), over expert-sorted row blocks.

Weights in the packed layout of ``ops/moe_pack.py``; rows come in blocks of ``BLOCK_M`` pairs of
one expert (``ops/moe_align.py``), so each program reads its expert's weight tile once for all
the block's pairs: at decode sizes a hit expert's weights are read and decoded once per step,
however many tokens chose it (expert-major), and from 64 rows up the tiles are wgmma-sized.

Decode (no per-element integer chains): a 32-bit word holds 8 codes; nibbles i and i + 4 are
turned into two fp16 lanes with two shifts, two masks and an or (``e2m1_word_pair``: E2M1 ×
2^-14 exactly, subnormals included), each lane widened to fp32, times its group's e4m3 scale
(decoded by placing its bits in an fp16, × 2^22) — the product is exact in bf16 (≤ 6
significant bits), so the ``tl.dot`` operand is the checkpoint's weight without the global scale.
Nibble i of the 32 words of a super-group is 32 consecutive K elements, so the K loop is
8 dots of K = 32 per super-group, each against a contiguous slice of the activation rows.
The global scale multiplies the fp32 accumulator once.

Kernel ``_moe_gemm_kernel`` modes (constexpr):
- ``GATED`` (gate_up): output column n needs weight rows n (gate) and I + n (up).
  ``SPLIT_K == 1``: stores ``h = bf16(silu(g·gg) · (u·gu))`` [P, I]. ``SPLIT_K > 1``: program s of
  the K split stores its raw fp32 partial sums of gate and up at ``part[s, p, n]`` and
  ``part[s, p, I + n]`` (more programs when the grid is thin; the down kernel combines them).
- not ``GATED`` (down): A rows are ``h[p]``, or with ``A_SPLIT > 1`` the partials, summed over s in
  order, scaled by the expert's globals and passed through silu·mul and bf16 rounding in the
  prologue (the same values the unsplit path stores). ``ROUTED``: output row × its routing
  weight; stores fp32 ``y[p]`` (``ops/moe_reduce.py`` sums a token's pairs in a fixed order).
"""

from __future__ import annotations

from ._triton import HAVE_TRITON, tl, triton

if HAVE_TRITON:
    from ..kernels._common import dot_bf16, e2m1_word_pair, round_bf16

SUB = 32  # K elements per dot (nibble i of a super-group's 32 words)


@triton.jit
def _scale_f32(b):
    """e4m3 bits (int32 0..255) → fp32 value × 2^14 (folds ``e2m1_word_pair``'s 2^-14 back)."""
    h = ((b & 0x80) << 8) | ((b & 0x7F) << 7)  # fp16 with the e4m3 bits: value × 2^-8, exact
    return h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 4194304.0  # × 2^22


@triton.jit
def _weight_tile(v, p_s, m_n, BLOCK_N: tl.constexpr):
    """Decoded codes v [BLOCK_N, 32] (× 2^-14) times their two groups' scales (bytes at p_s, p_s + 1)
    → the bf16 tile [32, BLOCK_N] for ``tl.dot`` (exact)."""
    o_2 = tl.arange(0, 2)
    b_s = tl.load(p_s[:, None] + o_2[None, :], mask=m_n[:, None], other=0).to(tl.int32)
    b_w = tl.reshape(tl.reshape(v, [BLOCK_N, 2, 16]) * _scale_f32(b_s)[:, :, None], [BLOCK_N, 32])
    return tl.trans(b_w.to(tl.bfloat16))


@triton.jit
def _a_slice(a_ptr, o_r, m_r, kk0, K_TRUE, stride_am, stride_as, INTER, g_gate, g_up,
             A_DIV: tl.constexpr, A_SPLIT: tl.constexpr, BLOCK_M: tl.constexpr):
    """Activation columns [kk0, kk0 + 32) of the block's rows, bf16 [BLOCK_M, 32]: row ``o_r // A_DIV``
    of a, or (A_SPLIT > 1) ``bf16(silu(g·gg) · (u·gu))`` from the split partials of row o_r."""
    o_kk = kk0 + tl.arange(0, 32)
    m = m_r[:, None] & (o_kk < K_TRUE)[None, :]
    if A_SPLIT > 1:
        p = a_ptr + o_r[:, None] * stride_am + o_kk[None, :]
        b_g = tl.zeros([BLOCK_M, 32], dtype=tl.float32)
        b_u = tl.zeros([BLOCK_M, 32], dtype=tl.float32)
        for s in tl.static_range(A_SPLIT):  # fixed order
            b_g += tl.load(p + s * stride_as, mask=m, other=0.0)
            b_u += tl.load(p + s * stride_as + INTER, mask=m, other=0.0)
        b_g = b_g * g_gate
        return round_bf16(b_g * tl.sigmoid(b_g) * (b_u * g_up)).to(tl.bfloat16)
    else:
        return tl.load(a_ptr + (o_r // A_DIV)[:, None] * stride_am + o_kk[None, :], mask=m, other=0.0)


@triton.jit
def _moe_gemm_kernel(
    a_ptr, w32_ptr, w8_ptr, g_ptr, g13_ptr, c_ptr, sid_ptr, bexp_ptr, tw_ptr,
    P, N, K_TRUE, N_SG, ROW_WORDS, INTER,
    stride_am, stride_as, stride_we, stride_ge, stride_cm, stride_cs,
    A_DIV: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr, SPLIT_K: tl.constexpr, A_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Grid (row blocks, cdiv(N, BLOCK_N), SPLIT_K); output columns [0, N) (for GATED: N = I, the
    up rows follow at N). w32_ptr / w8_ptr: the packed weights as int32 / uint8 (stride_we and
    ROW_WORDS in int32 words). stride_as: between A split partials; stride_cs: between output
    split partials (GATED with SPLIT_K > 1). g13_ptr: the gate/up globals (A_SPLIT > 1)."""
    i_b = tl.program_id(0)
    i_n = tl.program_id(1)
    i_s = tl.program_id(2)
    i_e = tl.load(bexp_ptr + i_b).to(tl.int64)
    if i_e < 0:
        return
    o_r = tl.load(sid_ptr + i_b * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    m_r = o_r < P
    o_r = tl.where(m_r, o_r, 0)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    o_w = tl.arange(0, 32)
    row_gate = i_e * stride_we + o_n.to(tl.int64) * ROW_WORDS  # [BLOCK_N] word offsets of the rows
    row_up = row_gate + N * ROW_WORDS
    g_gate = 1.0
    g_up = 1.0
    if A_SPLIT > 1:
        g_gate = tl.load(g13_ptr + 2 * i_e)
        g_up = tl.load(g13_ptr + 2 * i_e + 1)
    per = tl.cdiv(N_SG, SPLIT_K)
    sg_lo = i_s * per
    sg_hi = tl.minimum(sg_lo + per, N_SG)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for sg in range(sg_lo, sg_hi):
        k_base = sg * 256
        b_w = tl.load(w32_ptr + (row_gate + sg * 36)[:, None] + o_w[None, :], mask=m_n[:, None], other=0)
        p_s = w8_ptr + (row_gate + sg * 36 + 32) * 4  # the 16 scale bytes of each row
        if GATED:
            b_wu = tl.load(w32_ptr + (row_up + sg * 36)[:, None] + o_w[None, :], mask=m_n[:, None], other=0)
            p_su = w8_ptr + (row_up + sg * 36 + 32) * 4
        for i in tl.static_range(4):
            v_lo, v_hi = e2m1_word_pair(b_w, i)  # nibbles i and i + 4: K elements 32i.. and 32(i + 4)..
            b_a = _a_slice(a_ptr, o_r, m_r, k_base + 32 * i, K_TRUE, stride_am, stride_as, INTER, g_gate, g_up,
                           A_DIV, A_SPLIT, BLOCK_M)
            acc = dot_bf16(b_a, _weight_tile(v_lo, p_s + 2 * i, m_n, BLOCK_N), acc)
            b_a2 = _a_slice(a_ptr, o_r, m_r, k_base + 32 * (i + 4), K_TRUE, stride_am, stride_as, INTER, g_gate, g_up,
                            A_DIV, A_SPLIT, BLOCK_M)
            acc = dot_bf16(b_a2, _weight_tile(v_hi, p_s + 2 * (i + 4), m_n, BLOCK_N), acc)
            if GATED:
                u_lo, u_hi = e2m1_word_pair(b_wu, i)
                acc_up = dot_bf16(b_a, _weight_tile(u_lo, p_su + 2 * i, m_n, BLOCK_N), acc_up)
                acc_up = dot_bf16(b_a2, _weight_tile(u_hi, p_su + 2 * (i + 4), m_n, BLOCK_N), acc_up)
    m_c = m_r[:, None] & m_n[None, :]
    if GATED:
        if SPLIT_K > 1:  # raw partial sums; the down kernel applies the globals and silu·mul
            p_c = c_ptr + i_s * stride_cs + o_r[:, None] * stride_cm + o_n[None, :]
            tl.store(p_c, acc, mask=m_c)
            tl.store(p_c + N, acc_up, mask=m_c)
        else:
            b_g = acc * tl.load(g_ptr + i_e * stride_ge)
            b_h = b_g * tl.sigmoid(b_g) * (acc_up * tl.load(g_ptr + i_e * stride_ge + 1))
            tl.store(c_ptr + o_r[:, None] * stride_cm + o_n[None, :], round_bf16(b_h).to(tl.bfloat16), mask=m_c)
    else:
        b_y = acc * tl.load(g_ptr + i_e * stride_ge)
        if ROUTED:
            b_y = b_y * tl.load(tw_ptr + o_r, mask=m_r, other=0.0)[:, None]
        tl.store(c_ptr + o_r[:, None] * stride_cm + o_n[None, :], b_y, mask=m_c)

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

Summation order is fixed by K alone, never by the launch configuration, so a pair's result is
the same whatever bucket (block sizes, split) its batch size picked: K is cut in chunks of
``CHUNK_SG`` super-groups; each chunk is accumulated from zero, and the chunk sums are added in
increasing order (``((c0 + c1) + c2) + …``). Split-K only distributes whole chunks over programs.

Kernels:
- ``_moe_gemm_kernel`` with ``GATED`` (gate_up): output column n needs weight rows n (gate) and
  I + n (up). ``SPLIT_K == 1``: stores ``h = bf16(silu(g·gg) · (u·gu))`` [P, I]. ``SPLIT_K > 1``
  (more programs when the grid is thin): stores each chunk's raw fp32 sums of gate and up at
  ``part[c, p, n]`` and ``part[c, p, I + n]``; ``_combine_kernel`` then adds the chunks in order
  and applies the same epilogue (``_silu_mul``), giving bitwise the same h.
- ``_moe_gemm_kernel`` without ``GATED`` (down, ``ROUTED``): A rows ``h[p]``, output row × its
  routing weight, stored fp32 ``y[p]`` (``ops/moe_reduce.py`` sums a token's pairs in a fixed order).
"""

from __future__ import annotations

from ._triton import HAVE_TRITON, tl, triton

if HAVE_TRITON:
    from ..kernels._common import INTERPRET, e2m1_word_pair, round_bf16

CHUNK_SG = 2  # super-groups per chunk of the fixed summation order (512 K elements)


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
def _dot(a, b, acc):
    """acc + a @ b (bf16 tiles, fp32 accumulation). Under the interpreter as a broadcast product summed
    over K: numpy's matmul rounds a row differently depending on its position and the row count, which
    would hide (or fake) a batch dependence; on a GPU the tensor-core ``tl.dot``."""
    if INTERPRET:
        return acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _silu_mul(b_g, b_u, g_gate, g_up):
    """The gate_up epilogue on fp32 sums: ``bf16(silu(g·gg) · (u·gu))``, still held in fp32."""
    b_g = b_g * g_gate
    return round_bf16(b_g * tl.sigmoid(b_g) * (b_u * g_up))


@triton.jit
def _sg_dots(acc, acc_up, a_ptr, o_r, m_r, stride_am, k_base, K_TRUE, w32_ptr, w8_ptr, row_gate, row_up, sg, m_n,
             A_DIV: tl.constexpr, GATED: tl.constexpr, BLOCK_N: tl.constexpr):
    """acc (and acc_up) += A[:, k_base : k_base + 256] @ W_sg^T for super-group sg of the rows
    ``row_gate`` (``row_up``) (int32 word offsets [BLOCK_N])."""
    o_w = tl.arange(0, 32)
    o_k = tl.arange(0, 32)
    b_w = tl.load(w32_ptr + (row_gate + sg * 36)[:, None] + o_w[None, :], mask=m_n[:, None], other=0)
    p_s = w8_ptr + (row_gate + sg * 36 + 32) * 4  # the 16 scale bytes of each row
    if GATED:
        b_wu = tl.load(w32_ptr + (row_up + sg * 36)[:, None] + o_w[None, :], mask=m_n[:, None], other=0)
        p_su = w8_ptr + (row_up + sg * 36 + 32) * 4
    p_a = a_ptr + (o_r // A_DIV)[:, None] * stride_am + k_base + o_k[None, :]
    for i in tl.static_range(4):
        v_lo, v_hi = e2m1_word_pair(b_w, i)  # nibbles i and i + 4: K elements 32i.. and 32(i + 4)..
        m_lo = m_r[:, None] & ((k_base + 32 * i + o_k) < K_TRUE)[None, :]
        b_a = tl.load(p_a + 32 * i, mask=m_lo, other=0.0)
        m_hi = m_r[:, None] & ((k_base + 32 * (i + 4) + o_k) < K_TRUE)[None, :]
        b_a2 = tl.load(p_a + 32 * (i + 4), mask=m_hi, other=0.0)
        acc = _dot(b_a, _weight_tile(v_lo, p_s + 2 * i, m_n, BLOCK_N), acc)
        acc = _dot(b_a2, _weight_tile(v_hi, p_s + 2 * (i + 4), m_n, BLOCK_N), acc)
        if GATED:
            u_lo, u_hi = e2m1_word_pair(b_wu, i)
            acc_up = _dot(b_a, _weight_tile(u_lo, p_su + 2 * i, m_n, BLOCK_N), acc_up)
            acc_up = _dot(b_a2, _weight_tile(u_hi, p_su + 2 * (i + 4), m_n, BLOCK_N), acc_up)
    return acc, acc_up


@triton.jit
def _block_rows(sid_ptr, bexp_ptr, i_b, P, E, DIRECT: tl.constexpr, BLOCK_M: tl.constexpr):
    """Row block i_b → (expert, pair ids [BLOCK_M] (padding → 0), row mask); expert < 0: nothing to do.
    DIRECT (T = 1: the k pairs have distinct experts): block b is pair b alone, bexp_ptr the flat ids."""
    o_m = tl.arange(0, BLOCK_M)
    i_e = tl.load(bexp_ptr + i_b).to(tl.int64)
    if DIRECT:
        i_e = tl.where((i_e >= 0) & (i_e < E), i_e, -1)
        m_r = o_m == 0
        o_r = tl.where(m_r, i_b, 0).to(tl.int64)
    else:
        o_r = tl.load(sid_ptr + i_b * BLOCK_M + o_m).to(tl.int64)
        m_r = o_r < P
        o_r = tl.where(m_r, o_r, 0)
    return i_e, o_r, m_r


@triton.jit
def _k_sums(a_ptr, o_r, m_r, stride_am, K_TRUE, w32_ptr, w8_ptr, row_gate, row_up, m_n, c_lo, c_hi, N_SG,
            A_DIV: tl.constexpr, GATED: tl.constexpr, CHUNK_SG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The fp32 sums over the chunks [c_lo, c_hi) of K, each chunk accumulated from zero and added in order."""
    tot = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    tot_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for c in range(c_lo, c_hi):
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for sg in range(c * CHUNK_SG, tl.minimum(c * CHUNK_SG + CHUNK_SG, N_SG)):
            acc, acc_up = _sg_dots(acc, acc_up, a_ptr, o_r, m_r, stride_am, sg * 256, K_TRUE, w32_ptr, w8_ptr,
                                   row_gate, row_up, sg, m_n, A_DIV, GATED, BLOCK_N)
        tot += acc
        tot_up += acc_up
    return tot, tot_up


@triton.jit
def _moe_gemm_kernel(
    a_ptr, w32_ptr, w8_ptr, g_ptr, c_ptr, sid_ptr, bexp_ptr, tw_ptr,
    P, N, K_TRUE, N_SG, ROW_WORDS, E,
    stride_am, stride_we, stride_ge, stride_cm, stride_cc,
    A_DIV: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr, SPLIT_K: tl.constexpr, DIRECT: tl.constexpr,
    CHUNK_SG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Grid (row blocks, cdiv(N, BLOCK_N), SPLIT_K); output columns [0, N) (GATED: N = I, the up
    rows follow at N). w32_ptr / w8_ptr: the packed weights as int32 / uint8 (stride_we and
    ROW_WORDS in int32 words). stride_cc: between chunk partials (GATED, SPLIT_K > 1)."""
    i_b = tl.program_id(0)
    i_n = tl.program_id(1)
    i_s = tl.program_id(2)
    i_e, o_r, m_r = _block_rows(sid_ptr, bexp_ptr, i_b, P, E, DIRECT, BLOCK_M)
    if i_e < 0:
        return
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    m_c = m_r[:, None] & m_n[None, :]
    row_gate = i_e * stride_we + o_n.to(tl.int64) * ROW_WORDS  # [BLOCK_N] word offsets of the rows
    row_up = row_gate + N * ROW_WORDS
    n_chunks = tl.cdiv(N_SG, CHUNK_SG)
    per = tl.cdiv(n_chunks, SPLIT_K)
    c_lo = i_s * per
    c_hi = tl.minimum(c_lo + per, n_chunks)
    if GATED and SPLIT_K > 1:  # each chunk's raw sums; _combine_kernel adds them in order
        for c in range(c_lo, c_hi):
            acc, acc_up = _k_sums(a_ptr, o_r, m_r, stride_am, K_TRUE, w32_ptr, w8_ptr, row_gate, row_up, m_n, c, c + 1,
                                  N_SG, A_DIV, GATED, CHUNK_SG, BLOCK_M, BLOCK_N)
            p_c = c_ptr + c * stride_cc + o_r[:, None] * stride_cm + o_n[None, :]
            tl.store(p_c, acc, mask=m_c)
            tl.store(p_c + N, acc_up, mask=m_c)
    else:
        tot, tot_up = _k_sums(a_ptr, o_r, m_r, stride_am, K_TRUE, w32_ptr, w8_ptr, row_gate, row_up, m_n, c_lo, c_hi,
                              N_SG, A_DIV, GATED, CHUNK_SG, BLOCK_M, BLOCK_N)
        if GATED:
            b_h = _silu_mul(tot, tot_up, tl.load(g_ptr + i_e * stride_ge), tl.load(g_ptr + i_e * stride_ge + 1))
            tl.store(c_ptr + o_r[:, None] * stride_cm + o_n[None, :], b_h.to(tl.bfloat16), mask=m_c)
        else:
            b_y = tot * tl.load(g_ptr + i_e * stride_ge)
            if ROUTED:
                b_y = b_y * tl.load(tw_ptr + o_r, mask=m_r, other=0.0)[:, None]
            tl.store(c_ptr + o_r[:, None] * stride_cm + o_n[None, :], b_y, mask=m_c)


@triton.jit
def _combine_kernel(part_ptr, sid_ptr, bexp_ptr, g_ptr, h_ptr, P, N, N_CHUNKS, E, stride_pc, stride_pm, stride_hm,
                    DIRECT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid (row blocks, cdiv(N, BLOCK_N)): h = ``_silu_mul`` of the chunk partials added in order."""
    i_b = tl.program_id(0)
    i_n = tl.program_id(1)
    i_e, o_r, m_r = _block_rows(sid_ptr, bexp_ptr, i_b, P, E, DIRECT, BLOCK_M)
    if i_e < 0:
        return
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m = m_r[:, None] & (o_n < N)[None, :]
    p = part_ptr + o_r[:, None] * stride_pm + o_n[None, :]
    tot = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    tot_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for c in range(N_CHUNKS):
        tot += tl.load(p + c * stride_pc, mask=m, other=0.0)
        tot_up += tl.load(p + c * stride_pc + N, mask=m, other=0.0)
    b_h = _silu_mul(tot, tot_up, tl.load(g_ptr + 2 * i_e), tl.load(g_ptr + 2 * i_e + 1))
    tl.store(h_ptr + o_r[:, None] * stride_hm + o_n[None, :], b_h.to(tl.bfloat16), mask=m)


@triton.jit
def _down_token_kernel(h_ptr, w32_ptr, w8_ptr, g_ptr, ids_ptr, tw_ptr, out_ptr, N, K_TRUE, N_SG, ROW_WORDS, E,
                       stride_hm, stride_we, stride_om,
                       TOP_K: tl.constexpr, CHUNK_SG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Down projection and the k-sum in one, token-major (T = 1, where each pair is a distinct expert):
    grid (T, cdiv(N, BLOCK_N)); program t adds its pairs' ``y = (h_p W_eᵀ)·g_e·w_p`` in increasing j,
    each computed as in ``_moe_gemm_kernel`` (row 0 of a block) and summed as ``moe_reduce`` does, so
    the output is bitwise that of the expert-major path; rounds once to bf16."""
    i_t = tl.program_id(0).to(tl.int64)
    i_n = tl.program_id(1)
    o_m = tl.arange(0, BLOCK_M)
    o_n = i_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_n = o_n < N
    b_out = tl.zeros([BLOCK_N], dtype=tl.float32)
    n_chunks = tl.cdiv(N_SG, CHUNK_SG)
    for j in tl.static_range(TOP_K):
        i_p = i_t * TOP_K + j
        i_e = tl.load(ids_ptr + i_p).to(tl.int64)
        if (i_e >= 0) & (i_e < E):
            m_r = o_m == 0
            o_r = tl.where(m_r, i_p, 0).to(tl.int64)
            row = i_e * stride_we + o_n.to(tl.int64) * ROW_WORDS
            tot, _unused = _k_sums(h_ptr, o_r, m_r, stride_hm, K_TRUE, w32_ptr, w8_ptr, row, row, m_n, 0, n_chunks,
                                   N_SG, 1, False, CHUNK_SG, BLOCK_M, BLOCK_N)
            b_y = tot * tl.load(g_ptr + i_e) * tl.load(tw_ptr + i_p)
            b_out += tl.sum(tl.where(m_r[:, None], b_y, 0.0), axis=0)
    tl.store(out_ptr + i_t * stride_om + o_n, round_bf16(b_out).to(tl.bfloat16), mask=m_n)

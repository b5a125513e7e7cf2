"""The grouped W4A16 GEMM of the MoE (both projections), over expert-sorted row blocks.

Weights in the packed layout of ``ops/moe_pack.py``; rows come in blocks of ``BLOCK_M`` pairs of
one expert (``ops/moe_align.py``), so each program reads its expert's weight tile once for all
the block's pairs: at decode sizes a hit expert's weights are read and decoded once per step,
however many tokens chose it (expert-major), and from 64 rows up the tiles are wgmma-sized.

Decode (``ops/moe_decode.py``): nibbles i and i + 4 of a 32-bit word are two K-adjacent elements, so two shifts,
two masks, an or and one ``mul.rn.bf16x2`` by the group's scale make one bf16x2 register of the dot operand: the
checkpoint's weight without its global scale, times 2^-10, exactly (no fp32 on the way). Nibble pair i of the 32
words of a super-group is 64 consecutive K elements, so the K loop is 4 dots of K = 64 per super-group, each against
a contiguous slice of the activation rows. The global scale (and the 2^10) multiply the fp32 sums once.

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
    from ..kernels._common import INTERPRET, round_bf16
    from .moe_decode import W_UNSCALE, decode_pair

CHUNK_SG = 2  # super-groups per chunk of the fixed summation order (512 K elements)


@triton.jit
def _pair_tile(b_w, p_s, m_n, I: tl.constexpr, BLOCK_N: tl.constexpr):
    """Nibble pair I of the words b_w [BLOCK_N, 32] (K elements 64I .. 64I + 63 of the super-group) times their groups'
    scales (bf16 ``s × 2^116`` at p_s + 4I .. p_s + 4I + 3; word w is in group 4I + w // 8) → the bf16 tile
    [64, BLOCK_N] × 2^-10 for ``tl.dot`` (exact, ``ops/moe_decode.py``)."""
    o_4 = tl.arange(0, 4)
    b_s = tl.load(p_s[:, None] + 4 * I + o_4[None, :], mask=m_n[:, None], other=0).to(tl.bfloat16, bitcast=True)
    s = tl.reshape(tl.broadcast_to(b_s[:, :, None], [BLOCK_N, 4, 8]), [BLOCK_N, 32])
    lo, hi = decode_pair(b_w, s, I)  # elements 64I + 2w and 64I + 2w + 1
    return tl.trans(tl.reshape(tl.join(lo, hi), [BLOCK_N, 64]))


@triton.jit
def _dot(a, b, acc):
    """acc + a @ b (bf16 tiles, K = 64, fp32 accumulation). Under the interpreter as products summed per k16 block,
    the blocks added in K order (as the tensor cores take them): numpy's matmul rounds a row differently depending on
    its position and the row count, which would hide (or fake) a batch dependence; on a GPU the tensor-core ``tl.dot``."""
    if INTERPRET:
        p = a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :]  # [M, 64, N]
        s = tl.sum(tl.reshape(p, [p.shape[0], 4, 16, p.shape[2]]), axis=2)  # [M, 4, N]
        o_4 = tl.arange(0, 4)[None, :, None]
        for j in tl.static_range(4):
            acc = acc + tl.sum(tl.where(o_4 == j, s, 0.0), axis=1)
        return acc
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _silu_mul(b_g, b_u, g_gate, g_up):
    """The gate_up epilogue on fp32 sums: ``bf16(silu(g·gg) · (u·gu))``, still held in fp32."""
    b_g = b_g * g_gate
    return round_bf16(b_g * tl.sigmoid(b_g) * (b_u * g_up))


@triton.jit
def _sg_dots(acc, acc_up, a_ptr, o_r, m_r, stride_am, k_base, K_TRUE, w32_ptr, w16_ptr, row_gate, row_up, sg, m_n,
             A_DIV: tl.constexpr, GATED: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_K: tl.constexpr):
    """acc (and acc_up) += A[:, k_base : k_base + 256] @ W_sgᵀ · 2^-10 for super-group sg of the rows ``row_gate``
    (``row_up``) (int32 word offsets [BLOCK_N]), as four K = 64 dots in K order."""
    o_w = tl.arange(0, 32)
    o_k = tl.arange(0, 64)
    b_w = tl.load(w32_ptr + (row_gate + sg * 40)[:, None] + o_w[None, :], mask=m_n[:, None], other=0)
    p_s = w16_ptr + (row_gate + sg * 40 + 32) * 2  # the 16 bf16 scales of each row
    if GATED:
        b_wu = tl.load(w32_ptr + (row_up + sg * 40)[:, None] + o_w[None, :], mask=m_n[:, None], other=0)
        p_su = w16_ptr + (row_up + sg * 40 + 32) * 2
    p_a = a_ptr + (o_r // A_DIV)[:, None] * stride_am + k_base + o_k[None, :]
    for i in tl.static_range(4):
        if EVEN_K:  # K_TRUE % 256 == 0: a row mask only, so the loads vectorise
            m_a = m_r[:, None]
        else:
            m_a = m_r[:, None] & ((k_base + 64 * i + o_k) < K_TRUE)[None, :]
        b_a = tl.load(p_a + 64 * i, mask=m_a, other=0.0)
        acc = _dot(b_a, _pair_tile(b_w, p_s, m_n, i, BLOCK_N), acc)
        if GATED:
            acc_up = _dot(b_a, _pair_tile(b_wu, p_su, m_n, i, BLOCK_N), acc_up)
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
def _k_sums(a_ptr, o_r, m_r, stride_am, K_TRUE, w32_ptr, w16_ptr, row_gate, row_up, m_n, c_lo, c_hi, N_SG,
            A_DIV: tl.constexpr, GATED: tl.constexpr, CHUNK_SG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            EVEN_K: tl.constexpr):
    """The fp32 sums over the chunks [c_lo, c_hi) of K, each chunk accumulated from zero and added in order."""
    tot = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    tot_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for c in range(c_lo, c_hi):
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for sg in range(c * CHUNK_SG, tl.minimum(c * CHUNK_SG + CHUNK_SG, N_SG)):
            acc, acc_up = _sg_dots(acc, acc_up, a_ptr, o_r, m_r, stride_am, sg * 256, K_TRUE, w32_ptr, w16_ptr,
                                   row_gate, row_up, sg, m_n, A_DIV, GATED, BLOCK_N, EVEN_K)
        tot += acc
        tot_up += acc_up
    return tot * W_UNSCALE, tot_up * W_UNSCALE  # the operands were × 2^-10 (exact both ways)


@triton.jit
def _moe_gemm_kernel(
    a_ptr, w32_ptr, w16_ptr, g_ptr, c_ptr, sid_ptr, bexp_ptr, tw_ptr,
    P, N, K_TRUE, N_SG, ROW_WORDS, E,
    stride_am, stride_we, stride_ge, stride_cm, stride_cc,
    A_DIV: tl.constexpr, GATED: tl.constexpr, ROUTED: tl.constexpr, SPLIT_K: tl.constexpr, DIRECT: tl.constexpr,
    CHUNK_SG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_K: tl.constexpr,
):
    """Grid (row blocks, cdiv(N, BLOCK_N), SPLIT_K); output columns [0, N) (GATED: N = I, the up
    rows follow at N). w32_ptr / w16_ptr: the packed weights as int32 / int16 (stride_we and
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
            acc, acc_up = _k_sums(a_ptr, o_r, m_r, stride_am, K_TRUE, w32_ptr, w16_ptr, row_gate, row_up, m_n, c, c + 1,
                                  N_SG, A_DIV, GATED, CHUNK_SG, BLOCK_M, BLOCK_N, EVEN_K)
            p_c = c_ptr + c * stride_cc + o_r[:, None] * stride_cm + o_n[None, :]
            tl.store(p_c, acc, mask=m_c)
            tl.store(p_c + N, acc_up, mask=m_c)
    else:
        tot, tot_up = _k_sums(a_ptr, o_r, m_r, stride_am, K_TRUE, w32_ptr, w16_ptr, row_gate, row_up, m_n, c_lo, c_hi,
                              N_SG, A_DIV, GATED, CHUNK_SG, BLOCK_M, BLOCK_N, EVEN_K)
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
def _down_token_kernel(h_ptr, w32_ptr, w16_ptr, g_ptr, ids_ptr, tw_ptr, out_ptr, N, K_TRUE, N_SG, ROW_WORDS, E,
                       stride_hm, stride_we, stride_om,
                       TOP_K: tl.constexpr, CHUNK_SG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       EVEN_K: tl.constexpr):
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
            tot, _unused = _k_sums(h_ptr, o_r, m_r, stride_hm, K_TRUE, w32_ptr, w16_ptr, row, row, m_n, 0, n_chunks,
                                   N_SG, 1, False, CHUNK_SG, BLOCK_M, BLOCK_N, EVEN_K)
            b_y = tot * tl.load(g_ptr + i_e) * tl.load(tw_ptr + i_p)
            b_out += tl.sum(tl.where(m_r[:, None], b_y, 0.0), axis=0)
    tl.store(out_ptr + i_t * stride_om + o_n, round_bf16(b_out).to(tl.bfloat16), mask=m_n)

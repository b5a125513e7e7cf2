"""The swapped-operand K step of the MoE GEMM (``ops/moe_gemm.py``, ``SWAP``): weights as the dot's first operand.

At decode sizes a row block holds one or two real pairs, so the kernel's time is the weight decode, not the
tensor cores (the H200 profile at T = 32: the integer pipe busiest, 3.1 instructions issued per cycle, DRAM at 28 %,
docs/results/h200-2026-12-04-c). The unswapped step decodes each K = 32 slice in fp32 ([BLOCK_N, 32]: fp16 lanes
widened, times the fp32 scale, cast to bf16) and transposes it into the dot's second operand. This one computes
``accᵀ [BLOCK_N, BLOCK_M] += W [BLOCK_N, 16] @ Aᵀ [16, BLOCK_M]``: the decoded tile is already in the first
operand's [M, K] order, and on a GPU a pair of codes becomes a pair of scaled bf16 in five integer operations and
one ``mul.rn.bf16x2`` (``_decode_pair``), never passing through fp32.

Exactness (why the result is bitwise that of the unswapped step): E2M1 bits placed in a bf16 (magnitude in bits
6..8, sign in 15) are the code's value × 2^-126, subnormals included; the group's e4m3 scale is carried as the bf16
``s × 2^116`` (``_scale_adj``; s ≤ 448, so no overflow); their product ``v · s · 2^-10`` has at most 6 significant
bits and lies in [2^-20, 2^12], so it is exact. The dots see the unswapped step's operands times 2^-10 in the
same K order (k16 blocks ``32i``, ``32i + 16``, ``32(i+4)``, ``32(i+4) + 16`` for i = 0..3, as the K = 32 dots there
take them), so ``_k_sums`` multiplies the transposed sum by 2^10 and every later rounding is the same.
"""

from __future__ import annotations

from ._triton import HAVE_TRITON, tl, triton

if HAVE_TRITON:
    from ..kernels._common import INTERPRET, e2m1_word_pair

#: 2^102: an e4m3 scale decoded × 2^14 (``moe_gemm._scale_f32``) times this is s × 2^116.
_TO_ADJ = tl.constexpr(5.0706024009129176e30)
#: 2^-112: under the interpreter, fp16-decoded codes (× 2^-14) times ``s × 2^116`` times this is v · s · 2^-10.
_INTERP_UNADJ = tl.constexpr(1.925929944387236e-34)
#: 2^10, what ``_k_sums`` multiplies the swapped sum by.
SWAP_UNSCALE = tl.constexpr(1024.0)


@triton.jit
def _scale_adj(p_s, g, m_n):
    """Group g's e4m3 scale of each row (bytes at p_s + g, [BLOCK_N]) → bf16 s × 2^116 (exact), shape [BLOCK_N, 1]."""
    b = tl.load(p_s + g, mask=m_n, other=0).to(tl.int32)
    h = ((b & 0x80) << 8) | ((b & 0x7F) << 7)  # fp16 bits: s × 2^-8
    s = h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * 4194304.0 * _TO_ADJ  # × 2^22 × 2^102
    return s.to(tl.bfloat16)[:, None]


@triton.jit
def _decode_pair(w, s_lo, s_hi, I: tl.constexpr):
    """Codes I and I + 4 of int32 words w [BLOCK_N, 16] → two bf16 tiles ``v · s · 2^-10`` (s_lo, s_hi: the codes'
    group scales as ``_scale_adj`` gives them, [BLOCK_N, 1])."""
    if INTERPRET:
        v_lo, v_hi = e2m1_word_pair(w, I)  # fp32, value × 2^-14
        lo = v_lo * s_lo.to(tl.float32) * _INTERP_UNADJ
        hi = v_hi * s_hi.to(tl.float32) * _INTERP_UNADJ
        return lo.to(tl.bfloat16), hi.to(tl.bfloat16)
    else:
        s_lo = tl.broadcast_to(s_lo, w.shape)
        s_hi = tl.broadcast_to(s_hi, w.shape)
        # magnitude bits 4I..4I+2 (and 4I+16..) to 6..8 (22..24), sign bit 4I+3 (4I+19) to 15 (31)
        if I == 0:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shl.b32 m, $2, 6; and.b32 m, m, 0x01C001C0; shl.b32 s, $2, 12; "
                "and.b32 s, s, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $4}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h,h", [w, s_lo, s_hi], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        elif I == 1:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shl.b32 m, $2, 2; and.b32 m, m, 0x01C001C0; shl.b32 s, $2, 8; "
                "and.b32 s, s, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $4}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h,h", [w, s_lo, s_hi], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        elif I == 2:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shr.u32 m, $2, 2; and.b32 m, m, 0x01C001C0; shl.b32 s, $2, 4; "
                "and.b32 s, s, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $4}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h,h", [w, s_lo, s_hi], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        else:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shr.u32 m, $2, 6; and.b32 m, m, 0x01C001C0; "
                "and.b32 s, $2, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $4}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h,h", [w, s_lo, s_hi], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)


@triton.jit
def _dot_t(w, a_t, acc):
    """acc + w @ a_t (bf16 [N, 16] and [16, M], fp32 [N, M]); under the interpreter as ``moe_gemm._dot`` sums one
    k16 block (the same products, added in the same order)."""
    if INTERPRET:
        return acc + tl.sum(w.to(tl.float32)[:, :, None] * a_t.to(tl.float32)[None, :, :], axis=1)
    else:
        return tl.dot(w, a_t, acc)


@triton.jit
def _a_block(p_a, m_r, o_h, k_base, k0, K_TRUE):
    """Aᵀ rows k_base + k0 .. + 15 of the block's pairs, [16, BLOCK_M] (0 past K_TRUE and on padding pairs)."""
    return tl.load(p_a + k0, mask=m_r[None, :] & ((k_base + k0 + o_h) < K_TRUE)[:, None], other=0.0)


@triton.jit
def _sg_dots_t(acc, acc_up, a_ptr, o_r, m_r, stride_am, k_base, K_TRUE, w32_ptr, w8_ptr, row_gate, row_up, sg, m_n,
               A_DIV: tl.constexpr, GATED: tl.constexpr, BLOCK_N: tl.constexpr):
    """accᵀ (and acc_upᵀ) [BLOCK_N, BLOCK_M] += W_sg A[:, k_base : k_base + 256]ᵀ · 2^-10 for super-group sg of the rows
    ``row_gate`` (``row_up``) (int32 word offsets [BLOCK_N]); the K order of ``moe_gemm._sg_dots``."""
    o_h = tl.arange(0, 16)
    p_w = w32_ptr + (row_gate + sg * 36)[:, None] + o_h[None, :]
    w0 = tl.load(p_w, mask=m_n[:, None], other=0)  # words 0..15: K elements 32i + 0..15 in nibble i
    w1 = tl.load(p_w + 16, mask=m_n[:, None], other=0)  # words 16..31
    p_s = w8_ptr + (row_gate + sg * 36 + 32) * 4
    if GATED:
        p_wu = w32_ptr + (row_up + sg * 36)[:, None] + o_h[None, :]
        u0 = tl.load(p_wu, mask=m_n[:, None], other=0)
        u1 = tl.load(p_wu + 16, mask=m_n[:, None], other=0)
        p_su = w8_ptr + (row_up + sg * 36 + 32) * 4
    p_a = a_ptr + (o_r // A_DIV)[None, :] * stride_am + k_base + o_h[:, None]  # Aᵀ [16, BLOCK_M]
    for i in tl.static_range(4):  # k16 blocks 32i, 32i + 16, 32(i + 4), 32(i + 4) + 16
        a0 = _a_block(p_a, m_r, o_h, k_base, 32 * i, K_TRUE)
        a1 = _a_block(p_a, m_r, o_h, k_base, 32 * i + 16, K_TRUE)
        a2 = _a_block(p_a, m_r, o_h, k_base, 32 * i + 128, K_TRUE)
        a3 = _a_block(p_a, m_r, o_h, k_base, 32 * i + 144, K_TRUE)
        lo0, hi0 = _decode_pair(w0, _scale_adj(p_s, 2 * i, m_n), _scale_adj(p_s, 2 * i + 8, m_n), i)
        lo1, hi1 = _decode_pair(w1, _scale_adj(p_s, 2 * i + 1, m_n), _scale_adj(p_s, 2 * i + 9, m_n), i)
        acc = _dot_t(lo0, a0, acc)
        acc = _dot_t(lo1, a1, acc)
        acc = _dot_t(hi0, a2, acc)
        acc = _dot_t(hi1, a3, acc)
        if GATED:
            lo0, hi0 = _decode_pair(u0, _scale_adj(p_su, 2 * i, m_n), _scale_adj(p_su, 2 * i + 8, m_n), i)
            lo1, hi1 = _decode_pair(u1, _scale_adj(p_su, 2 * i + 1, m_n), _scale_adj(p_su, 2 * i + 9, m_n), i)
            acc_up = _dot_t(lo0, a0, acc_up)
            acc_up = _dot_t(lo1, a1, acc_up)
            acc_up = _dot_t(hi0, a2, acc_up)
            acc_up = _dot_t(hi1, a3, acc_up)
    return acc, acc_up

"""NVFP4 codes → scaled bf16 pairs for the MoE GEMM (``ops/moe_gemm.py``), exactly, without fp32.

The packed layout (``ops/moe_pack.py``) keeps two K-adjacent elements in nibbles i and i + 4 of one int32 word, 16
bits apart: one bf16x2 register once each nibble's 3 magnitude bits sit in bf16 bits 6..8 (22..24) and its sign in
bit 15 (31). Those bits, read as bf16, are the E2M1 value × 2^-126 (subnormals included: code 1 is 2^-127); one
``mul.rn.bf16x2`` by the group's e4m3 scale carried as ``s × 2^116`` (stored so by ``ops/moe_pack.py``; s ≤ 448
keeps it below bf16's maximum) gives ``v · s · 2^-10``: at most 6 significant bits in [2^-20, 2^12], so exact. The GEMM's sums are therefore
the unscaled ones × 2^-10 bit for bit, and ``W_UNSCALE`` (2^10) takes them back exactly. On a GPU a pair costs two
shifts, two masks, an or and the multiply; under the interpreter the same values come from fp32 arithmetic.
"""

from __future__ import annotations

from ._triton import HAVE_TRITON, tl, triton

if HAVE_TRITON:
    from ..kernels._common import INTERPRET, e2m1_word_pair

#: 2^-112: under the interpreter, fp16-decoded codes (× 2^-14) times ``s × 2^116`` times this is v · s · 2^-10.
_INTERP_UNADJ = tl.constexpr(1.925929944387236e-34)
#: 2^10: what the GEMM's fp32 sums of these operands are multiplied by.
W_UNSCALE = tl.constexpr(1024.0)


@triton.jit
def decode_pair(w, s, I: tl.constexpr):
    """Nibbles I and I + 4 of int32 words w → two bf16 tensors ``v · s · 2^-10`` (s: the words' group scales as bf16
    ``s × 2^116``, w's shape or broadcastable to it)."""
    s = tl.broadcast_to(s, w.shape)
    if INTERPRET:
        v_lo, v_hi = e2m1_word_pair(w, I)  # fp32, value × 2^-14
        f = s.to(tl.float32) * _INTERP_UNADJ
        return (v_lo * f).to(tl.bfloat16), (v_hi * f).to(tl.bfloat16)
    else:
        if I == 0:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shl.b32 m, $2, 6; and.b32 m, m, 0x01C001C0; shl.b32 s, $2, 12; "
                "and.b32 s, s, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $3}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h", [w, s], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        elif I == 1:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shl.b32 m, $2, 2; and.b32 m, m, 0x01C001C0; shl.b32 s, $2, 8; "
                "and.b32 s, s, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $3}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h", [w, s], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        elif I == 2:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shr.u32 m, $2, 2; and.b32 m, m, 0x01C001C0; shl.b32 s, $2, 4; "
                "and.b32 s, s, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $3}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h", [w, s], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
        else:
            return tl.inline_asm_elementwise(
                "{ .reg .b32 m, s, c; shr.u32 m, $2, 6; and.b32 m, m, 0x01C001C0; "
                "and.b32 s, $2, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $3}; mul.rn.bf16x2 m, m, c; "
                "mov.b32 {$0, $1}, m; }",
                "=h,=h,r,h", [w, s], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)

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


def _pair_asm(mag: str, sign: str) -> str:
    """PTX for one nibble pair: ``mag`` moves the pair's magnitude bits to bf16 bits 6..8 / 22..24 and ``sign`` its
    sign bits to 15 / 31 (each a shift of $2 into m / s, or a move for no shift); then the masks, the or and the
    multiply by the scale pair {$3, $3}."""
    return ("{ .reg .b32 m, s, c; " + mag + "; and.b32 m, m, 0x01C001C0; " + sign + "; "
            "and.b32 s, s, 0x80008000; or.b32 m, m, s; mov.b32 c, {$3, $3}; mul.rn.bf16x2 m, m, c; "
            "mov.b32 {$0, $1}, m; }")


#: Nibbles I and I + 4 sit at bits 4I..4I+3 and 4I+16..4I+19 of the word: the shifts that place them.
_ASM = (
    tl.constexpr(_pair_asm("shl.b32 m, $2, 6", "shl.b32 s, $2, 12")),
    tl.constexpr(_pair_asm("shl.b32 m, $2, 2", "shl.b32 s, $2, 8")),
    tl.constexpr(_pair_asm("shr.u32 m, $2, 2", "shl.b32 s, $2, 4")),
    tl.constexpr(_pair_asm("shr.u32 m, $2, 6", "mov.b32 s, $2")),
)
_ASM_0, _ASM_1, _ASM_2, _ASM_3 = _ASM


@triton.jit
def _asm_pair(w, s, ASM: tl.constexpr):
    return tl.inline_asm_elementwise(ASM, "=h,=h,r,h", [w, s], dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)


@triton.jit
def decode_pair(w, s, I: tl.constexpr):
    """Nibbles I and I + 4 of int32 words w → two bf16 tensors ``v · s · 2^-10`` (s: the words' group scales as bf16
    ``s × 2^116``, w's shape or broadcastable to it)."""
    s = tl.broadcast_to(s, w.shape)
    if INTERPRET:
        v_lo, v_hi = e2m1_word_pair(w, I)  # fp32, value × 2^-14
        f = s.to(tl.float32) * _INTERP_UNADJ
        return (v_lo * f).to(tl.bfloat16), (v_hi * f).to(tl.bfloat16)
    elif I == 0:
        return _asm_pair(w, s, _ASM_0)
    elif I == 1:
        return _asm_pair(w, s, _ASM_1)
    elif I == 2:
        return _asm_pair(w, s, _ASM_2)
    else:
        return _asm_pair(w, s, _ASM_3)

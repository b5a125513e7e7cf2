"""Triton helpers shared by the kernels: bf16 rounding and E2M1 decoding in registers.

Both are written with integer bit operations so that the GPU and the Triton interpreter
(the CPU tests) give bit-identical results: the interpreter truncates fp32 → bf16 casts
and computes bf16 arithmetic on raw uint16 storage, so kernels never do either directly.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

#: True when the kernels run under the Triton interpreter (TRITON_INTERPRET=1 at import time,
#: which is also when ``triton.jit`` decides). Its ``tl.dot`` multiplies bf16 tiles as raw
#: uint16 (triton 3.9), so ``dot_bf16`` upcasts there; on a GPU the bf16 tensor-core dot runs.
INTERPRET = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes"))

#: Tests set this to True: kernel outputs and intermediates are then allocated filled with NaN,
#: so an element a kernel fails to write shows up as NaN instead of stale memory.
POISON_ALLOCATIONS = False

#: ``e2m1_scaled`` returns the E2M1 value times 2^-14; multiply by this (folded into the block scale).
E2M1_UNSCALE = tl.constexpr(16384.0)


def new_empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty``, or NaN-filled when ``POISON_ALLOCATIONS`` is set (float dtypes only)."""
    if POISON_ALLOCATIONS:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


@triton.jit
def round_bf16(x):
    """fp32 → the nearest bf16 value (ties to even), still held in fp32; the cast after it is exact."""
    b = x.to(tl.uint32, bitcast=True)
    b = b + 0x7FFF + ((b >> 16) & 1)
    b = (b >> 16) << 16
    return b.to(tl.float32, bitcast=True)


@triton.jit
def e2m1_scaled(c):
    """E2M1 codes (int32, 0..15; bit 3 sign) → fp32 values × 2^-14.

    Puts the 3 magnitude bits where fp16 keeps its 2 low exponent bits and top mantissa bit
    (``c << 9``): exponent e > 0 gives 2^(e-15)(1 + m/2), e = 0 the subnormal m·2^-15, i.e.
    the E2M1 magnitude {0, .5, 1, 1.5, 2, 3, 4, 6} times 2^-14; bit 3 goes to the fp16 sign.
    """
    h = ((c & 7) << 9) | ((c & 8) << 12)
    return h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)


@triton.jit
def dot_bf16(a, b, acc):
    """acc + a @ b for bf16 tiles, fp32 accumulation (products of bf16 values are exact in fp32)."""
    if INTERPRET:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _halves_to_f32(h):
    """int32 holding two fp16 (low and high half-words) → the two as fp32."""
    if INTERPRET:
        lo = h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (h >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        return lo, hi
    else:
        return tl.inline_asm_elementwise(
            "{ .reg .b16 l, h; mov.b32 {l, h}, $2; cvt.f32.f16 $0, l; cvt.f32.f16 $1, h; }",
            "=r,=r,r", [h], dtype=(tl.float32, tl.float32), is_pure=True, pack=1,
        )


@triton.jit
def e2m1_word_pair(w, I: tl.constexpr):
    """Codes I and 4 + I of int32 words of 8 packed E2M1 codes → two fp32 tensors (values × 2^-14).

    Both codes are decoded at once, one per 16-bit lane: the 3 magnitude bits shifted to fp16
    bits 9..11 (as ``e2m1_scaled``), the sign to bit 15, with two shifts and two masks for the
    pair (``e2m1_scaled`` spends about as many per code), then each lane converts to fp32.
    """
    w = w.to(tl.uint32, bitcast=True)
    if I < 3:
        mag = (w << (9 - 4 * I)) & 0x0E000E00
    else:
        mag = (w >> 3) & 0x0E000E00
    h = mag | ((w << (12 - 4 * I)) & 0x80008000)
    return _halves_to_f32(h)

"""``causal_conv1d_update``: one decode step of the depthwise causal conv1d + SiLU.

Reference: ``reference.causal_conv1d_update_ref``. Program (sequence, channel block): the
window [state | x] of each channel is W values; the state shifts left by one in place.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import new_empty, round_bf16


@triton.jit
def _conv_update_kernel(
    x_ptr, state_ptr, w_ptr, slot_ptr, y_ptr,
    C, stride_xb, stride_ss, stride_sc, stride_wc, stride_yb,
    W: tl.constexpr, BLOCK_C: tl.constexpr,
):
    i_b = tl.program_id(0).to(tl.int64)
    i_c = tl.program_id(1)
    o_c = i_c * BLOCK_C + tl.arange(0, BLOCK_C)
    m_c = o_c < C
    i_s = tl.load(slot_ptr + i_b).to(tl.int64)
    p_st = state_ptr + i_s * stride_ss + o_c.to(tl.int64) * stride_sc  # [BC], oldest input first
    p_w = w_ptr + o_c.to(tl.int64) * stride_wc
    b_x = tl.load(x_ptr + i_b * stride_xb + o_c, mask=m_c, other=0.0)
    b_acc = tl.zeros([BLOCK_C], dtype=tl.float32)
    for i_w in tl.static_range(W - 1):
        b_sw = tl.load(p_st + i_w, mask=m_c, other=0.0)
        b_acc += b_sw.to(tl.float32) * tl.load(p_w + i_w, mask=m_c, other=0.0).to(tl.float32)
        if i_w > 0:  # shift left: each thread reads its channel's column before overwriting it
            tl.store(p_st + i_w - 1, b_sw, mask=m_c)
    b_acc += b_x.to(tl.float32) * tl.load(p_w + W - 1, mask=m_c, other=0.0).to(tl.float32)
    tl.store(p_st + W - 2, b_x.to(state_ptr.dtype.element_ty), mask=m_c)
    b_y = b_acc * tl.sigmoid(b_acc)
    tl.store(y_ptr + i_b * stride_yb + o_c, round_bf16(b_y).to(y_ptr.dtype.element_ty), mask=m_c)


def causal_conv1d_update_triton(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    slots: torch.Tensor,
    *,
    block_c: int = 128,
    num_warps: int = 4,
) -> torch.Tensor:
    """Triton twin of ``reference.causal_conv1d_update_ref``; x bf16 [B, C] → y bf16 [B, C] (contiguous).

    x's rows may be strided (a column slice of in_proj's output is read in place). conv_state
    [S, C, W-1] contiguous, same dtype as x (it stores raw inputs); weight [C, W]; W ≥ 2.
    """
    b_count, c_dim = x.shape
    width = weight.shape[1]
    y = new_empty(x.shape, x.dtype, x.device)
    if b_count == 0:
        return y
    if x.stride(-1) != 1:
        x = x.contiguous()
    grid = (b_count, triton.cdiv(c_dim, block_c))
    _conv_update_kernel[grid](
        x, conv_state, weight, slots, y,
        c_dim, x.stride(0), conv_state.stride(0), conv_state.stride(1), weight.stride(0), y.stride(0),
        W=width, BLOCK_C=block_c, num_warps=num_warps,
    )
    return y

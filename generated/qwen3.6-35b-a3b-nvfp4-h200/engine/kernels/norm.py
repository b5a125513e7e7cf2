"""RMSNorm kernels: the zero-centred norm with a fused residual add, and the GDN gated norm.

One program per row (per token and head for the gated norm); the whole row sits in registers
(H = 2048 or D = 128 here), so each element is read once and written once: both ops are pure
bandwidth. References: ``reference.rmsnorm_ref`` and ``reference.gated_rmsnorm_ref``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import new_empty, round_bf16


@triton.jit
def _rmsnorm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, s_ptr,
    H, stride_x, stride_r, stride_y, stride_s, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK_H: tl.constexpr,
):
    i_t = tl.program_id(0).to(tl.int64)
    o_h = tl.arange(0, BLOCK_H)
    m_h = o_h < H
    b_x = tl.load(x_ptr + i_t * stride_x + o_h, mask=m_h, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        b_r = tl.load(r_ptr + i_t * stride_r + o_h, mask=m_h, other=0.0).to(tl.float32)
        # round the sum to the activation dtype first: HF adds the residual in bf16
        b_x = round_bf16(b_x + b_r)
        tl.store(s_ptr + i_t * stride_s + o_h, b_x.to(s_ptr.dtype.element_ty), mask=m_h)
    b_w = tl.load(w_ptr + o_h, mask=m_h, other=0.0).to(tl.float32)
    b_rstd = tl.rsqrt(tl.sum(b_x * b_x, axis=0) / H + eps)
    b_y = b_x * b_rstd * (1.0 + b_w)
    tl.store(y_ptr + i_t * stride_y + o_h, round_bf16(b_y).to(y_ptr.dtype.element_ty), mask=m_h)


@triton.jit
def _gated_rmsnorm_kernel(
    o_ptr, z_ptr, w_ptr, y_ptr,
    D, stride_ot, stride_oh, stride_zt, stride_zh, stride_yt, stride_yh, eps,
    ROUND_WN: tl.constexpr, BLOCK_D: tl.constexpr,
):
    i_t = tl.program_id(0).to(tl.int64)  # row (token) and head: any strides, so column slices need no copy
    i_h = tl.program_id(1).to(tl.int64)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < D
    b_o = tl.load(o_ptr + i_t * stride_ot + i_h * stride_oh + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_z = tl.load(z_ptr + i_t * stride_zt + i_h * stride_zh + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_w = tl.load(w_ptr + o_d, mask=m_d, other=0.0).to(tl.float32)
    b_rstd = tl.rsqrt(tl.sum(b_o * b_o, axis=0) / D + eps)
    # HF rounds the normalised value to bf16, multiplies by w in w's dtype (bf16 or fp32),
    # then by silu(z) in fp32
    b_nw = round_bf16(b_o * b_rstd) * b_w
    if ROUND_WN:  # a bf16 weight: torch computes w * n in bf16
        b_nw = round_bf16(b_nw)
    b_y = b_nw * (b_z * tl.sigmoid(b_z))
    p_y = y_ptr + i_t * stride_yt + i_h * stride_yh + o_d
    tl.store(p_y, round_bf16(b_y).to(y_ptr.dtype.element_ty), mask=m_d)


def rmsnorm_triton(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    *,
    num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of ``reference.rmsnorm_ref``: x, residual bf16 [T, H] (last dim contiguous), w [H].

    Returns ``(y, s)`` bf16 [T, H]; ``s`` is x itself when residual is None.
    """
    t_count, hidden = x.shape
    y = new_empty(x.shape, x.dtype, x.device)
    s = new_empty(x.shape, x.dtype, x.device) if residual is not None else x
    if t_count == 0:
        return y, s
    r = residual if residual is not None else x
    _rmsnorm_kernel[(t_count,)](
        x, r, w, y, s,
        hidden, x.stride(0), r.stride(0), y.stride(0), s.stride(0), eps,
        HAS_RESIDUAL=residual is not None, BLOCK_H=triton.next_power_of_2(hidden), num_warps=num_warps,
    )
    return y, s


def gated_rmsnorm_triton(
    o: torch.Tensor, z: torch.Tensor, w: torch.Tensor, eps: float, *, num_warps: int = 1
) -> torch.Tensor:
    """Triton twin of ``reference.gated_rmsnorm_ref``: o, z bf16 [N, D] or [T, NH, D], w [D] → bf16 like o.

    o and z need a contiguous last dim; their other strides are free (z may be a view of a
    column slice of in_proj's output). The output is a fresh contiguous tensor.
    """
    y = new_empty(o.shape, o.dtype, o.device)
    if o.numel() == 0:
        return y
    o3, z3, y3 = (t if t.dim() == 3 else t.unsqueeze(1) for t in (o, z, y))
    t_count, n_heads, dim = o3.shape
    _gated_rmsnorm_kernel[(t_count, n_heads)](
        o3, z3, w, y3, dim,
        o3.stride(0), o3.stride(1), z3.stride(0), z3.stride(1), y3.stride(0), y3.stride(1), eps,
        ROUND_WN=w.dtype == torch.bfloat16, BLOCK_D=triton.next_power_of_2(dim), num_warps=num_warps,
    )
    return y

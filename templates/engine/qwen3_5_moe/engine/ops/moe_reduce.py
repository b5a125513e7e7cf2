"""``moe_reduce``: each token's weighted expert outputs summed in a fixed order, rounded to bf16 once.

``out[t] = bf16(sum_{j=0..k-1} y[t·k + j])`` over the pairs that took part (expert id in [0, E)
and t < n_valid; the others were never computed and are skipped), in increasing j whatever the
batch: a token's output does not depend on which tokens share its batch or how the GEMM grid
was scheduled (no atomics). Rows t ≥ n_valid (CUDA-graph padding) are written as 0.
"""

from __future__ import annotations

import torch

from ._triton import HAVE_TRITON, require_triton, tl, triton

if HAVE_TRITON:
    from ..kernels._common import new_empty, round_bf16


def moe_reduce_ref(y: torch.Tensor, ids: torch.Tensor, n_experts: int, n_valid: int | None = None) -> torch.Tensor:
    """Plain torch: y fp32 [T·k, H], ids int [T, k] → bf16 [T, H] (module docstring)."""
    t, k = ids.shape
    ok = (ids >= 0) & (ids < n_experts)
    if n_valid is not None:
        ok &= (torch.arange(t, device=ids.device) < n_valid)[:, None]
    yy = torch.where(ok.reshape(-1, 1), y, 0.0).view(t, k, -1)
    out = yy[:, 0].clone()
    for j in range(1, k):
        out += yy[:, j]
    return out.to(torch.bfloat16)


@triton.jit
def _reduce_kernel(y_ptr, ids_ptr, nv_ptr, out_ptr, H, E, N_VALID, stride_y, stride_o,
                   TOP_K: tl.constexpr, HAS_NV: tl.constexpr, BLOCK_H: tl.constexpr):
    i_t = tl.program_id(0).to(tl.int64)
    i_h = tl.program_id(1)
    n_valid = N_VALID
    if HAS_NV:
        n_valid = tl.load(nv_ptr).to(tl.int64)
    o_h = i_h * BLOCK_H + tl.arange(0, BLOCK_H)
    m_h = o_h < H
    b_out = tl.zeros([BLOCK_H], dtype=tl.float32)
    if i_t < n_valid:
        for j in tl.static_range(TOP_K):
            b_e = tl.load(ids_ptr + i_t * TOP_K + j + o_h * 0)  # the pair's expert, broadcast
            m = m_h & (b_e >= 0) & (b_e < E)
            b_y = tl.load(y_ptr + (i_t * TOP_K + j) * stride_y + o_h, mask=m, other=0.0)
            b_out += b_y
    tl.store(out_ptr + i_t * stride_o + o_h, round_bf16(b_out).to(tl.bfloat16), mask=m_h)


def moe_reduce_triton(y: torch.Tensor, ids: torch.Tensor, n_experts: int, n_valid: torch.Tensor | None = None,
                      *, block_h: int = 1024, num_warps: int = 4) -> torch.Tensor:
    """The kernel; ``n_valid`` an int32 [1] device tensor or None (all rows real). Returns bf16 [T, H]."""
    require_triton("moe_reduce")
    t, k = ids.shape
    hidden = y.shape[1]
    out = new_empty((t, hidden), torch.bfloat16, y.device)
    if t == 0:
        return out
    ids = ids.contiguous()
    block_h = min(block_h, triton.next_power_of_2(hidden))
    _reduce_kernel[(t, triton.cdiv(hidden, block_h))](
        y, ids, n_valid if n_valid is not None else ids, out, hidden, n_experts, t, y.stride(0), out.stride(0),
        TOP_K=k, HAS_NV=n_valid is not None, BLOCK_H=block_h, num_warps=num_warps,
    )
    return out

"""``nvfp4_linear``: y = x @ W.T for one NVFP4 weight (W4A16). Reference: ``reference.nvfp4_linear_ref``.

M ≤ ``gemv_max_m`` (decode) takes the GEMV kernel: every weight byte read once per row,
bandwidth bound, no tensor cores. Larger M takes the ``tl.dot`` kernel on bf16 tiles.
"""

from __future__ import annotations

import torch
import triton

from ._common import new_empty
from .nvfp4_gemm import nvfp4_gemm_kernel, nvfp4_gemv_kernel


def nvfp4_linear_triton(
    x: torch.Tensor,
    packed: torch.Tensor,
    scale: torch.Tensor,
    gscale: torch.Tensor,
    *,
    gemv_max_m: int = 4,
    gemv_block_n: int = 8,
    gemv_block_k: int = 1024,
    gemv_num_warps: int = 4,
    gemv_words: int = 1,
    block_m: int = 64,
    block_n: int = 32,
    block_k: int = 128,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    """Triton twin of ``reference.nvfp4_linear_ref``.

    x: bf16 [M, K] (last dim contiguous); packed: uint8 [N, K/2]; scale: e4m3 [N, K/16];
    gscale: fp32, one element. Returns bf16 [M, N]. gemv_words: the GEMV reads the codes as int32
    words (two codes decoded per op), else bytes. Block sizes are powers of two; block_k ≥ 32
    (the dot path splits it into even and odd halves, each a ``tl.dot`` of depth ≥ 16), block_m ≥ 16.
    """
    m_rows, k_dim = x.shape
    n_dim = packed.shape[0]
    y = new_empty((m_rows, n_dim), x.dtype, x.device)
    if m_rows == 0:
        return y
    g = gscale.reshape(1).to(torch.float32)
    packed, scale = packed.contiguous(), scale.contiguous()
    if m_rows <= gemv_max_m:
        grid = (triton.cdiv(n_dim, gemv_block_n), m_rows)
        codes = packed.view(torch.int32) if gemv_words else packed
        nvfp4_gemv_kernel[grid](
            x, codes, scale, g, g, g, y,
            n_dim, k_dim,
            x.stride(0), 0, codes.stride(0), 0, scale.stride(0), 0, y.stride(0),
            A_DIV=1, SUM_K=1, HAS_EXPERT=False, GATED=False, ROUTED=False, OUT_BF16=True,
            WORDS=bool(gemv_words), UNROLL=False,
            BLOCK_N=gemv_block_n, BLOCK_K=min(gemv_block_k, max(32, triton.next_power_of_2(k_dim))),
            num_warps=gemv_num_warps,
        )
        return y
    block_m = max(16, min(block_m, triton.next_power_of_2(m_rows)))
    grid = (triton.cdiv(m_rows, block_m), triton.cdiv(n_dim, block_n))
    nvfp4_gemm_kernel[grid](
        x, packed, scale, g, y, g, g, g,
        m_rows, n_dim, k_dim,
        x.stride(0), 0, packed.stride(0), 0, scale.stride(0), 0, y.stride(0),
        A_DIV=1, SORTED=False, GATED=False, ROUTED=False, OUT_BF16=True,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages,
    )
    return y

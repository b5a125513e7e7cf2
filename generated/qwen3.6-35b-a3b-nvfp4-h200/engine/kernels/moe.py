"""``moe_nvfp4``: routed NVFP4 experts, fused-MoE style. Reference: ``reference.moe_nvfp4_ref``.

Token-expert pairs p = t*k + j (P = T*k of them) are the rows of both GEMMs:
1. gate_up: ``h[p] = silu(x[t] @ Wg_e.T) * (x[t] @ Wu_e.T)``, bf16 [P, I] (silu·mul in the epilogue);
2. down: ``y[p] = w[p] * (h[p] @ Wd_e.T)`` (routing weight in the epilogue);
3. ``out[t] = sum_j y[t*k + j]`` in fp32, in a fixed order (batch-invariant), cast to bf16 once.
   The GEMV path does this inside the down kernel (one program column per token); the
   sorted path writes y as fp32 [P, H] and sums it with torch.

T ≤ ``gemv_max_t`` (decode): the GEMV kernel with one program column per pair, reading only
the weights of the experts hit (each pair's expert once). Larger T: pairs are sorted by
expert and padded to BLOCK_M per expert (vLLM ``moe_align_block_size``, here in plain torch,
shapes static so it captures in a CUDA graph), then one grouped ``tl.dot`` GEMM per
projection, one expert per row block.
"""

from __future__ import annotations

import torch
import triton

from ._common import new_empty
from .nvfp4_gemm import nvfp4_gemm_kernel, nvfp4_gemv_kernel


def moe_align(topk_ids: torch.Tensor, n_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sort the P = T*k pairs by expert and pad each expert's run to a multiple of ``block_m``.

    Returns ``(sorted_ids int32 [R*block_m], block_expert int32 [R])`` with
    R = cdiv(P, block_m) + min(E, P), an upper bound on the blocks needed, so no value is
    read back to the host. Padding slots hold P; unused trailing blocks have expert -1.
    Pairs of one expert keep their order (stable sort).
    """
    flat = topk_ids.reshape(-1).to(torch.int64)  # [P]
    n_pairs = flat.numel()
    n_blocks = triton.cdiv(n_pairs, block_m) + min(n_experts, n_pairs)
    order = torch.argsort(flat, stable=True)
    # scatter_add, not bincount: bincount reads its output size back to the host (no CUDA graph)
    counts = torch.zeros(n_experts, dtype=torch.int64, device=flat.device).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends_padded = torch.cumsum(padded, 0)
    starts_padded = ends_padded - padded
    starts = torch.cumsum(counts, 0) - counts
    e_sorted = flat[order]
    dest = starts_padded[e_sorted] + torch.arange(n_pairs, device=flat.device) - starts[e_sorted]
    sorted_ids = torch.full((n_blocks * block_m,), n_pairs, dtype=torch.int32, device=flat.device)
    sorted_ids[dest] = order.to(torch.int32)
    block_start = torch.arange(n_blocks, device=flat.device) * block_m
    block_expert = torch.searchsorted(ends_padded, block_start, right=True)  # E past the last used block
    block_expert = torch.where(block_expert < n_experts, block_expert, -1).to(torch.int32)
    return sorted_ids, block_expert


def moe_nvfp4_triton(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w13: torch.Tensor,
    s13: torch.Tensor,
    g13: torch.Tensor,
    w2: torch.Tensor,
    s2: torch.Tensor,
    g2: torch.Tensor,
    *,
    gemv_max_t: int = 8,
    gemv_block_n: int = 16,
    gemv_block_k: int = 512,
    gemv_down_block_n: int = 8,
    gemv_num_warps: int = 8,
    gemv_words: int = 1,
    gemv_unroll: int = 1,
    block_m: int = 16,
    block_n: int = 32,
    block_k: int = 128,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    """Triton twin of ``reference.moe_nvfp4_ref``; shapes as in ``kernels.moe_nvfp4``.

    Block sizes are powers of two, block_k ≥ 32 (GEMV) / ≥ 64 with block_m ≥ 16 (tl.dot).
    gemv_words: the GEMV reads the codes as int32 words, two codes decoded per op (else bytes);
    gemv_unroll: the down GEMV unrolls its sum over the k pairs. Returns bf16 [T, H].
    """
    t_count, hidden = x.shape
    top_k = topk_ids.shape[1]
    n_exp, two_i = w13.shape[0], w13.shape[1]
    inter = two_i // 2
    n_pairs = t_count * top_k
    out = new_empty((t_count, hidden), x.dtype, x.device)
    if t_count == 0:
        return out
    w13, s13, w2, s2 = w13.contiguous(), s13.contiguous(), w2.contiguous(), s2.contiguous()
    g13, g2 = g13.contiguous(), g2.contiguous()
    tw = topk_weights.reshape(-1).to(torch.float32).contiguous()  # [P]
    h = new_empty((n_pairs, inter), x.dtype, x.device)  # silu(gate) * up
    if t_count <= gemv_max_t:
        ids = topk_ids.reshape(-1).contiguous()
        c13, c2 = (w13.view(torch.int32), w2.view(torch.int32)) if gemv_words else (w13, w2)
        flags = dict(WORDS=bool(gemv_words), UNROLL=bool(gemv_unroll))
        nvfp4_gemv_kernel[(triton.cdiv(inter, gemv_block_n), n_pairs)](
            x, c13, s13, g13, ids, tw, h,
            inter, hidden,
            x.stride(0), c13.stride(0), c13.stride(1), s13.stride(0), s13.stride(1), g13.stride(0), h.stride(0),
            A_DIV=top_k, SUM_K=1, HAS_EXPERT=True, GATED=True, ROUTED=False, OUT_BF16=True, **flags,
            BLOCK_N=gemv_block_n, BLOCK_K=min(gemv_block_k, max(32, triton.next_power_of_2(hidden))),
            num_warps=gemv_num_warps,
        )
        # one program column per token sums its k weighted expert outputs: no [P, H] buffer
        nvfp4_gemv_kernel[(triton.cdiv(hidden, gemv_down_block_n), t_count)](
            h, c2, s2, g2, ids, tw, out,
            hidden, inter,
            h.stride(0), c2.stride(0), c2.stride(1), s2.stride(0), s2.stride(1), g2.stride(0), out.stride(0),
            A_DIV=1, SUM_K=top_k, HAS_EXPERT=True, GATED=False, ROUTED=True, OUT_BF16=True, **flags,
            BLOCK_N=gemv_down_block_n, BLOCK_K=min(gemv_block_k, max(32, triton.next_power_of_2(inter))),
            num_warps=gemv_num_warps,
        )
        return out
    y = new_empty((n_pairs, hidden), torch.float32, x.device)  # weighted down outputs
    sorted_ids, block_expert = moe_align(topk_ids, n_exp, block_m)
    n_blocks = block_expert.numel()
    launch = dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=num_warps, num_stages=num_stages)
    nvfp4_gemm_kernel[(n_blocks, triton.cdiv(inter, block_n))](
        x, w13, s13, g13, h, sorted_ids, block_expert, tw,
        n_pairs, inter, hidden,
        x.stride(0), w13.stride(0), w13.stride(1), s13.stride(0), s13.stride(1), g13.stride(0), h.stride(0),
        A_DIV=top_k, SORTED=True, GATED=True, ROUTED=False, OUT_BF16=True, **launch,
    )
    nvfp4_gemm_kernel[(n_blocks, triton.cdiv(hidden, block_n))](
        h, w2, s2, g2, y, sorted_ids, block_expert, tw,
        n_pairs, hidden, inter,
        h.stride(0), w2.stride(0), w2.stride(1), s2.stride(0), s2.stride(1), g2.stride(0), y.stride(0),
        A_DIV=1, SORTED=True, GATED=False, ROUTED=True, OUT_BF16=False, **launch,
    )
    out.copy_(y.view(t_count, top_k, hidden).sum(1))  # fp32 sum in a fixed order, one rounding
    return out

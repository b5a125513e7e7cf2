"""``moe_align``: token-expert pairs sorted by expert and padded per expert to whole row blocks, one launch.

The P = T·k pairs (pair p = t·k + j: token t's j-th expert ``ids[t, j]``) are listed expert by
expert, each expert's run padded to a multiple of ``block_m``, so that a row block of the grouped
GEMM (``ops/moe_gemm.py``) holds pairs of one expert only. A pair takes part only when its token
is real (t < ``n_valid``: CUDA-graph padding rows route to nothing) and its id is in [0, E); the
others appear nowhere, so no expert is read for them.

Outputs, sized for the worst case so nothing is read back to the host (graph-capturable):
``sorted_ids`` int32 [R·block_m] (pair ids; P marks a padding slot) and ``block_expert`` int32 [R]
(the expert of each block, -1 past the last used block), R = cdiv(P, block_m) + min(E, P).
Pairs of one expert keep increasing p order (the result does not depend on scheduling).

Kernel: one program per expert e (+1 that marks the unused blocks). Each counts every expert's
pairs (``tl.histogram`` over the ids, chunk by chunk) to find where its run starts, then lists
its own pairs in order (a running count plus ``tl.cumsum`` within each chunk). This replaces the
eight torch ops (argsort, scatter_add, cumsums, searchsorted, …) of ``kernels/moe.moe_align``.
"""

from __future__ import annotations

import torch

from ._triton import require_triton, tl, triton

CHUNK = 1024  # pairs per step of the kernel's scans


def align_blocks(n_pairs: int, n_experts: int, block_m: int) -> int:
    """R, the number of row blocks ``moe_align`` provides for (an upper bound on those used)."""
    return triton.cdiv(n_pairs, block_m) + min(n_experts, n_pairs)


def moe_align_ref(ids: torch.Tensor, n_experts: int, block_m: int, n_valid: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain torch (the specification): shapes and meaning in the module docstring.

    ids: int [T, k]; n_valid: real tokens (None: all T).
    """
    t, k = ids.shape
    n_pairs = t * k
    flat = ids.reshape(-1).to(torch.int64).cpu()
    n_valid = t if n_valid is None else n_valid
    ok = (flat >= 0) & (flat < n_experts) & (torch.arange(n_pairs) // k < n_valid)
    n_blocks = align_blocks(n_pairs, n_experts, block_m)
    sorted_ids = torch.full((n_blocks * block_m,), n_pairs, dtype=torch.int32)
    block_expert = torch.full((n_blocks,), -1, dtype=torch.int32)
    row = 0
    for e in range(n_experts):
        pairs = torch.nonzero(ok & (flat == e)).flatten()
        if pairs.numel() == 0:
            continue
        sorted_ids[row : row + pairs.numel()] = pairs.to(torch.int32)
        nb = triton.cdiv(pairs.numel(), block_m)
        block_expert[row // block_m : row // block_m + nb] = e
        row += nb * block_m
    return sorted_ids.to(ids.device), block_expert.to(ids.device)


@triton.jit
def _align_kernel(
    ids_ptr, nv_ptr, sid_ptr, bexp_ptr,
    P, E, TOP_K, N_VALID, N_BLOCKS,
    HAS_NV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, CHUNK: tl.constexpr,
):
    i_e = tl.program_id(0)
    n_valid = N_VALID
    if HAS_NV:
        n_valid = tl.load(nv_ptr).to(tl.int32)
    o_c = tl.arange(0, CHUNK)
    o_e = tl.arange(0, BLOCK_E)
    # counts of every expert (bin E collects the pairs that take no part)
    b_cnt = tl.zeros([BLOCK_E], dtype=tl.int32)
    for c0 in range(0, P, CHUNK):
        o_p = c0 + o_c
        b_id = tl.load(ids_ptr + o_p, mask=o_p < P, other=-1).to(tl.int32)
        b_ok = (b_id >= 0) & (b_id < E) & ((o_p // TOP_K) < n_valid)
        b_cnt += tl.histogram(tl.where(b_ok, b_id, E), BLOCK_E)
    b_blocks = tl.where(o_e < E, (b_cnt + BLOCK_M - 1) // BLOCK_M, 0)
    if i_e == E:  # the extra program: blocks past the last used one belong to no expert
        used = tl.sum(b_blocks, axis=0)
        for b0 in range(0, N_BLOCKS, CHUNK):
            o_b = b0 + o_c
            tl.store(bexp_ptr + o_b, tl.full([CHUNK], -1, tl.int32), mask=(o_b >= used) & (o_b < N_BLOCKS))
    else:
        blk0 = tl.sum(tl.where(o_e < i_e, b_blocks, 0), axis=0)  # first block of expert i_e
        n_blk = tl.sum(tl.where(o_e == i_e, b_blocks, 0), axis=0)
        mine = tl.sum(tl.where(o_e == i_e, b_cnt, 0), axis=0)
        for b0 in range(0, n_blk, CHUNK):
            o_b = b0 + o_c
            tl.store(bexp_ptr + blk0 + o_b, tl.full([CHUNK], 0, tl.int32) + i_e, mask=o_b < n_blk)
        row0 = blk0 * BLOCK_M
        for r0 in range(mine, n_blk * BLOCK_M, CHUNK):  # padding slots of the last block
            o_r = r0 + o_c
            tl.store(sid_ptr + row0 + o_r, tl.full([CHUNK], 0, tl.int32) + P, mask=o_r < n_blk * BLOCK_M)
        seen = 0
        if mine > 0:
            for c0 in range(0, P, CHUNK):
                o_p = c0 + o_c
                b_id = tl.load(ids_ptr + o_p, mask=o_p < P, other=-1).to(tl.int32)
                b_me = (b_id == i_e) & ((o_p // TOP_K) < n_valid) & (o_p < P)
                b_rank = tl.cumsum(b_me.to(tl.int32), axis=0) - 1
                tl.store(sid_ptr + row0 + seen + b_rank, o_p.to(tl.int32), mask=b_me)
                seen += tl.sum(b_me.to(tl.int32), axis=0)


def moe_align_triton(ids: torch.Tensor, n_experts: int, block_m: int, n_valid: torch.Tensor | None = None,
                     *, num_warps: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """The Triton kernel; ``n_valid`` is an int32 [1] device tensor (None: all T tokens are real)."""
    require_triton("moe_align")
    t, k = ids.shape
    n_pairs = t * k
    n_blocks = align_blocks(n_pairs, n_experts, block_m)
    sorted_ids = torch.empty(n_blocks * block_m, dtype=torch.int32, device=ids.device)
    block_expert = torch.empty(n_blocks, dtype=torch.int32, device=ids.device)
    if n_pairs == 0:
        return sorted_ids, block_expert
    ids = ids.contiguous()
    _align_kernel[(n_experts + 1,)](
        ids, n_valid if n_valid is not None else ids, sorted_ids, block_expert,
        n_pairs, n_experts, k, t, n_blocks,
        HAS_NV=n_valid is not None, BLOCK_M=block_m, BLOCK_E=triton.next_power_of_2(n_experts + 1),
        CHUNK=min(CHUNK, triton.next_power_of_2(n_pairs)), num_warps=num_warps,
    )
    return sorted_ids, block_expert

"""``moe_w4a16``: the routed MoE (shared expert included when stacked) on packed NVFP4 experts, every T.

``out[t] = sum_j w[t,j] · down_e(silu(gate_e(x_t)) · up_e(x_t))``, e = ids[t, j], over the pairs that
take part (id in [0, E), t < n_valid); with the shared expert stacked as expert E-1 of the packed
stack and its sigmoid gate as the last pair's weight (``kernels.route_topk(..., shared=True)``) this
is the whole MoE block in one pass. Four launches (five with split-K), shapes static (graph-capturable):

1. ``moe_align`` (one launch): pairs sorted by expert, padded to BLOCK_M per expert;
2. ``_moe_gemm_kernel`` gate_up (GATED): bf16 h [P, I], or with split-K fp32 chunk partials
   and ``_combine_kernel`` (one more launch) making h from them;
3. ``_moe_gemm_kernel`` down (ROUTED): fp32 y [P, H] (routing weight applied);
4. ``moe_reduce``: a token's pairs summed in increasing j, rounded once.

At T = 1 (batch-1 decode) the k pairs are distinct experts already: no align launch (block b is
pair b), and the down projection runs token-major with the k-sum inside (``_down_token_kernel``,
bitwise the same result): two launches, three with split-K. A lone row is always real (graphs
never pad a batch of 1), so ``n_valid`` is not read there.

The launch configuration is chosen by T through three buckets (``MoeBucket``, tunables
``moe_ops_{s,m,l}_*``): small T wants thin tiles and split-K (the grid is hit experts × N/BLOCK_N),
large T wgmma-sized tiles (BLOCK_M ≥ 64). The fp32 summation order depends on K only (``moe_gemm``'s
chunks), so a token's output is bitwise the same whatever else is in the batch and whichever bucket
the batch size picks (on a GPU, as far as the tensor-core instruction chosen for the block height
rounds alike; the interpreter tests check it bitwise).
Reference: ``moe_w4a16_ref`` (unpack, then ``kernels.reference.moe_nvfp4_ref``'s math), which is what CPU runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from .. import kernels
from ..kernels.reference import dequant_nvfp4_ref, mm_rows
from .moe_align import moe_align_triton
from .moe_pack import SG_BYTES, PackedExperts, unpack_experts
from .moe_reduce import moe_reduce_triton
from ._triton import HAVE_TRITON, require_triton, triton

if HAVE_TRITON:
    from ..kernels._common import new_empty
    from .moe_gemm import CHUNK_SG, _combine_kernel, _down_token_kernel, _moe_gemm_kernel


@dataclass(frozen=True)
class MoeBucket:
    """Launch configuration for one range of T (tokens per call).

    block_m: pairs per row block (≥ 16; 64/128 give wgmma tiles); block_n / down_block_n: output
    columns per program of gate_up (N = I) and of down (N = H); split_k: programs along K of gate_up (1 = no split; K = H is cut
    in whole chunks of 512, so at most 4 at H = 2048); num_warps, num_stages: Triton launch keywords.
    """

    block_m: int
    block_n: int
    down_block_n: int
    split_k: int
    num_warps: int
    num_stages: int


#: Defaults per bucket (s: T ≤ s_max_t, m: T ≤ m_max_t, l: larger). m and l are the fastest of
#: ``scripts/h200/moe_bench.py --sweep`` on the H200 for the K-pair-decoded layout at T = 32 and 64 (m; 24
#: configurations, the same winner at both) and T = 2,048 (l, keeping block_m 64 for the T just above m_max_t; 16
#: configurations). s is not swept, and took more than m at T = 16 on the H200 (docs/results/h200-2026-12-04-d): it
#: serves T = 1 only (the direct path), and T from 2 take m, whose work shrinks with the experts hit.
DEFAULTS = {
    "s": MoeBucket(block_m=16, block_n=32, down_block_n=16, split_k=4, num_warps=8, num_stages=2),
    "m": MoeBucket(block_m=16, block_n=64, down_block_n=64, split_k=1, num_warps=4, num_stages=2),
    "l": MoeBucket(block_m=64, block_n=64, down_block_n=128, split_k=1, num_warps=4, num_stages=2),
}
S_MAX_T = 1
M_MAX_T = 128


def pick_bucket(t: int, launch: dict) -> MoeBucket:
    """The ``MoeBucket`` for T tokens: defaults overridden by launch keywords ``{s,m,l}_<field>``
    and the bucket bounds ``s_max_t`` / ``m_max_t`` (the tunables ``moe_ops_*``)."""
    name = "s" if t <= launch.get("s_max_t", S_MAX_T) else "m" if t <= launch.get("m_max_t", M_MAX_T) else "l"
    over = {f: launch[f"{name}_{f}"] for f in MoeBucket.__dataclass_fields__ if f"{name}_{f}" in launch}
    return replace(DEFAULTS[name], **over)


def moe_w4a16_ref(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, pk: PackedExperts,
                  n_valid: torch.Tensor | None = None) -> torch.Tensor:
    """Plain torch (the specification): ``kernels.reference.moe_nvfp4_ref``'s math on the unpacked
    experts (row-invariant fp32 GEMMs: ``mm_rows``, h rounded to bf16, fp32 sum, one rounding); pairs with ids outside [0, E)
    and rows t ≥ n_valid contribute nothing (such rows give 0) and their experts are not read."""
    n_exp = pk.num_experts
    ok = (ids >= 0) & (ids < n_exp)
    if n_valid is not None:
        ok &= (torch.arange(ids.shape[0], device=ids.device) < n_valid.reshape(()).to(ids.device))[:, None]
    w13, s13, g13, w2, s2, g2 = unpack_experts(pk)
    inter = pk.inter
    out = torch.zeros(x.shape[0], pk.hidden, dtype=torch.float32, device=x.device)
    for e in torch.unique(ids[ok]).tolist():
        tok, pos = torch.where((ids == e) & ok)
        g = torch.cat([g13[e, 0].expand(inter), g13[e, 1].expand(inter)]).reshape(-1, 1)
        gu = mm_rows(x[tok], dequant_nvfp4_ref(w13[e], s13[e], g))  # [n, 2I]
        h = (F.silu(gu[:, :inter]) * gu[:, inter:]).to(x.dtype)
        y = mm_rows(h, dequant_nvfp4_ref(w2[e], s2[e], g2[e]))
        out.index_add_(0, tok, y * weights[tok, pos].float().unsqueeze(-1))
    return out.to(x.dtype)


def moe_w4a16_triton(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, pk: PackedExperts,
                     n_valid: torch.Tensor | None = None, **launch) -> torch.Tensor:
    """The Triton path (module docstring); ``launch``: bucket keywords (``pick_bucket``)."""
    require_triton("moe_w4a16")
    t, k = ids.shape
    hidden, inter, n_exp = pk.hidden, pk.inter, pk.num_experts
    n_pairs = t * k
    cfg = pick_bucket(t, launch)
    out_dev = x.device
    if t == 0:
        return new_empty((0, hidden), torch.bfloat16, out_dev)
    x = x.contiguous()
    tw = weights.reshape(-1).to(torch.float32).contiguous()
    direct = t == 1  # the k pairs of one token have distinct experts: no sort, no k-sum kernel
    if direct:
        block_expert = ids.reshape(-1).contiguous()  # block b = pair b (its expert; invalid ids skip it)
        sorted_ids = block_expert
    else:
        sorted_ids, block_expert = moe_align_triton(ids, n_exp, cfg.block_m, n_valid)
    n_blocks = block_expert.numel()
    w13_32, w2_32 = pk.w13.view(torch.int32), pk.w2.view(torch.int32)
    sg13, sg2 = pk.w13.shape[2] // SG_BYTES, pk.w2.shape[2] // SG_BYTES
    w13_16, w2_16 = pk.w13.view(torch.int16), pk.w2.view(torch.int16)
    n_chunks = triton.cdiv(sg13, CHUNK_SG)
    split = max(1, min(cfg.split_k, n_chunks))
    kw = dict(BLOCK_M=cfg.block_m, CHUNK_SG=CHUNK_SG, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    h = new_empty((n_pairs, inter), torch.bfloat16, out_dev)
    if split > 1:
        part = new_empty((n_chunks, n_pairs, 2 * inter), torch.float32, out_dev)
        c, c_args = part, (part.stride(1), part.stride(0))
    else:
        c, c_args = h, (h.stride(0), 0)
    _moe_gemm_kernel[(n_blocks, triton.cdiv(inter, cfg.block_n), split)](
        x, w13_32, w13_16, pk.g13, c, sorted_ids, block_expert, tw,
        n_pairs, inter, hidden, sg13, w13_32.stride(1), n_exp,
        x.stride(0), w13_32.stride(0), pk.g13.stride(0), *c_args,
        A_DIV=k, GATED=True, ROUTED=False, SPLIT_K=split, DIRECT=direct, BLOCK_N=cfg.block_n, EVEN_K=hidden % 256 == 0, **kw,
    )
    if split > 1:
        _combine_kernel[(n_blocks, triton.cdiv(inter, cfg.block_n))](
            part, sorted_ids, block_expert, pk.g13, h, n_pairs, inter, n_chunks, n_exp,
            part.stride(0), part.stride(1), h.stride(0),
            DIRECT=direct, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps,
        )
    if direct:
        out = new_empty((t, hidden), torch.bfloat16, out_dev)
        _down_token_kernel[(t, triton.cdiv(hidden, cfg.down_block_n))](
            h, w2_32, w2_16, pk.g2, block_expert, tw, out, hidden, inter, sg2, w2_32.stride(1), n_exp,
            h.stride(0), w2_32.stride(0), out.stride(0), TOP_K=k, BLOCK_N=cfg.down_block_n, EVEN_K=inter % 256 == 0, **kw,
        )
        return out
    y = new_empty((n_pairs, hidden), torch.float32, out_dev)
    _moe_gemm_kernel[(n_blocks, triton.cdiv(hidden, cfg.down_block_n), 1)](
        h, w2_32, w2_16, pk.g2, y, sorted_ids, block_expert, tw,
        n_pairs, hidden, inter, sg2, w2_32.stride(1), n_exp,
        h.stride(0), w2_32.stride(0), 1, y.stride(0), 0,
        A_DIV=1, GATED=False, ROUTED=True, SPLIT_K=1, DIRECT=False, BLOCK_N=cfg.down_block_n, EVEN_K=inter % 256 == 0, **kw,
    )
    return moe_reduce_triton(y, ids, n_exp, n_valid)


def moe_w4a16(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, pk: PackedExperts,
              n_valid: torch.Tensor | None = None, **launch) -> torch.Tensor:
    """Routed (+ stacked shared) NVFP4 experts on the packed layout.

    Args:
        x: bf16 [T, H]; ids: int [T, k] (ids outside [0, E) take no part); weights: fp32 [T, k];
        pk: ``PackedExperts`` (``ops/moe_pack.py``); n_valid: int32 [1] device tensor, rows t ≥ n_valid
        touch no expert and come out 0 (CUDA-graph padding), None = all rows real.
    Returns: bf16 [T, H]. Triton on CUDA (``kernels.BACKEND`` / ``REFERENCE_OPS`` name "moe_w4a16"),
    the reference elsewhere. Launch keywords: ``pick_bucket``.
    Raises: ValueError on shapes or dtypes that do not match.
    """
    t, k = _check(x, ids, weights, pk, n_valid)
    if kernels._use_triton(x, "moe_w4a16"):
        return moe_w4a16_triton(x, ids, weights, pk, n_valid, **launch)
    return moe_w4a16_ref(x, ids, weights, pk, n_valid)


def _check(x, ids, weights, pk: PackedExperts, n_valid) -> tuple[int, int]:
    if x.dim() != 2 or x.dtype != torch.bfloat16 or x.shape[1] != pk.hidden:
        raise ValueError(f"moe_w4a16: x must be bf16 [T, {pk.hidden}], got {x.dtype} {tuple(x.shape)}")
    if ids.dim() != 2 or ids.shape[0] != x.shape[0] or ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"moe_w4a16: ids must be int32/int64 [T, k] with T = {x.shape[0]}, got {ids.dtype} {tuple(ids.shape)}")
    if tuple(weights.shape) != tuple(ids.shape):
        raise ValueError(f"moe_w4a16: weights {tuple(weights.shape)} must match ids {tuple(ids.shape)}")
    if pk.w13.dtype != torch.uint8 or pk.w13.shape[2] % SG_BYTES or pk.w2.shape[2] % SG_BYTES:
        raise ValueError("moe_w4a16: experts are not in the packed layout; build them with ops.moe_pack.pack_experts")
    if n_valid is not None and (n_valid.numel() != 1 or n_valid.dtype != torch.int32):
        raise ValueError(f"moe_w4a16: n_valid must be an int32 tensor of one element, got {n_valid.dtype} {tuple(n_valid.shape)}")
    return ids.shape

"""Varlen causal flash attention for prefill over the slot KV cache, sigmoid output gate fused in.

Math: sequence i holds ``start_i`` tokens in slot ``slots[i]`` before this forward (``start_i =
positions[cu_seqlens[i]]``) and brings ``len_i`` new ones; the attention prologue
(``kernels.qk_norm_rope_cache``) has already written their K/V at rows start_i.. of the cache,
so query r (position p = start_i + r) attends to cache rows 0..p of its slot, kv head
``h // (HQ/HKV)`` (GQA), with ``softmax(q·k · scale)``; the result is rounded to bf16 and
multiplied by ``sigmoid(gate)`` in bf16 (HF: sigmoid rounded, product rounded).
Kernel: one program per (block of BLOCK_M queries of one sequence, q head), online softmax in
base 2 over BLOCK_N-key tiles read straight from the cache (no gather): the tiles wholly before
the block's first query unmasked, the rest with the causal mask. cu_seqlens, positions and
slots are read on the device (no host sync; ``_varlen.locate_block``).
Paged cache: keys are read through ``block_table`` (position p of slot s = row ``p % BS`` of block
``block_table[s, p // BS]``, ``kernels.paged``); no table = the static layout [S, L, HKV, D], slot s its
row s (the kernel compiled without the table: ``PAGED`` 0).
Reference: ``attention_prefill_ref`` (SDPA per sequence with an explicit causal mask).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import kernels
from ..kernels.paged import check_table, gather_kv
from ._triton import HAVE_TRITON, require_triton, tl, triton
from ._varlen import block_n, locate_block, max_blocks

if HAVE_TRITON:
    from ..kernels._common import INTERPRET, new_empty, round_bf16

#: Launch defaults (tunable through the keywords of ``attention_prefill``); head_dim 256 on an H200.
#: block_m 64 below ``LONG_T`` packed tokens (more programs for short prompts), 128 from there: on the H200 at
#: 16k causal tokens 128/64/8 warps/2 stages ran 5.15 ms (427 TFLOP/s) against 10.5 ms for 64/64.
DEFAULTS = {"block_m": 64, "block_n": 64, "num_warps": 8, "num_stages": 2}
LONG_T, LONG_BLOCK_M = 1024, 128
LOG2E = 1.4426950408889634

__all__ = ["DEFAULTS", "attention_prefill", "attention_prefill_ref", "attention_prefill_triton"]


# ---------------------------------------------------------------- reference
def attention_prefill_ref(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, gate: torch.Tensor,
    cu_seqlens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, scale: float,
    block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain torch: SDPA per sequence over its first start+len cached positions (``kernels.paged.gather_kv``)
    with a boolean causal mask (syncs to read cu_seqlens, positions, slots), then ``out * sigmoid(gate)`` in bf16."""
    t, nq, hd = q.shape
    o = torch.empty(t, nq, hd, dtype=q.dtype, device=q.device)
    cu = cu_seqlens.tolist()
    for i, slot in enumerate(slots.tolist()):
        a, b = cu[i], cu[i + 1]
        if a == b:
            continue
        start, n = int(positions[a]), b - a
        total = start + n
        qi = q[a:b].transpose(0, 1).unsqueeze(0)  # [1, nq, n, hd]
        ki = gather_kv(k_cache, block_table, slot, total).transpose(0, 1).unsqueeze(0)  # [1, nkv, total, hd]
        vi = gather_kv(v_cache, block_table, slot, total).transpose(0, 1).unsqueeze(0)
        mask = torch.arange(total, device=q.device)[None, :] <= (start + torch.arange(n, device=q.device))[:, None]
        oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=scale, enable_gqa=nq != ki.shape[1])
        o[a:b] = oi[0].transpose(0, 1)
    return o * torch.sigmoid(gate)


# ---------------------------------------------------------------- kernel
@triton.jit
def _tile(q, kc_ptr, vc_ptr, tb_ptr, kv_base, j0, o_n, o_d, m_d, hi, pos_r, acc, m_i, l_i, stride_ks, stride_kl, bs,
          qk_scale, CAUSAL: tl.constexpr, PAGED: tl.constexpr):
    """One BLOCK_N tile of keys j0.. : online-softmax update of (acc, m_i, l_i). PAGED 0: ``kv_base`` is the
    slot's row; 1: key j at row j % bs of block ``tb_ptr[j // bs]`` (the slot's block-table row); 2: the
    same with the whole tile in one block (BLOCK_N divides bs, j0 a multiple of BLOCK_N)."""
    j = j0 + o_n
    m_j = j < hi
    if PAGED == 2:
        blk = tl.load(tb_ptr + j0 // bs).to(tl.int64)
        p_kv = kv_base + blk * stride_ks + (j0 % bs + o_n)[:, None].to(tl.int64) * stride_kl + o_d[None, :]
    elif PAGED == 1:
        blk = tl.load(tb_ptr + j // bs, mask=m_j, other=0).to(tl.int64)
        p_kv = kv_base + blk[:, None] * stride_ks + (j % bs)[:, None].to(tl.int64) * stride_kl + o_d[None, :]
    else:
        p_kv = kv_base + j[:, None].to(tl.int64) * stride_kl + o_d[None, :]
    b_k = tl.load(kc_ptr + p_kv, mask=m_j[:, None] & m_d[None, :], other=0.0)
    if INTERPRET:  # the interpreter multiplies bf16 tiles as raw uint16: upcast there
        s = tl.dot(q.to(tl.float32), tl.trans(b_k.to(tl.float32)), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(b_k))
    s = s * qk_scale
    if CAUSAL:
        s = tl.where((j[None, :] <= pos_r[:, None]) & m_j[None, :], s, float("-inf"))
    else:
        s = tl.where(m_j[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    b_v = tl.load(vc_ptr + p_kv, mask=m_j[:, None] & m_d[None, :], other=0.0)
    if INTERPRET:
        acc = tl.dot(p, b_v.to(tl.float32), acc * alpha[:, None], input_precision="ieee")
    else:
        acc = tl.dot(p.to(b_v.dtype), b_v, acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def _attn_prefill_kernel(
    q_ptr, kc_ptr, vc_ptr, g_ptr, cu_ptr, pos_ptr, slot_ptr, tb_ptr, o_ptr,
    N, HD, stride_qt, stride_qh, stride_ks, stride_kl, stride_kh, stride_tb, stride_gt, stride_gh, stride_ot, stride_oh,
    qk_scale, bs,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_SEQ: tl.constexpr,
    PAGED: tl.constexpr,
):
    i_b = tl.program_id(0)
    i_h = tl.program_id(1).to(tl.int64)
    i_n, bos, eos, m0 = locate_block(cu_ptr, N, i_b, BLOCK_M, BLOCK_SEQ)
    live = m0 < eos
    o_m = tl.arange(0, BLOCK_M)
    o_n = tl.arange(0, BLOCK_N)
    o_d = tl.arange(0, BLOCK_D)
    m_d = o_d < HD
    r = m0 + o_m
    m_r = r < eos
    i_nc = tl.minimum(i_n, N - 1)
    start = tl.load(pos_ptr + bos).to(tl.int64)  # bos = 0 past the last block: still a valid row
    i_s = tl.load(slot_ptr + i_nc).to(tl.int64)
    pos_r = start + (r - bos)  # absolute position of each query
    first = start + (m0 - bos)  # position of the block's first query
    hi = tl.where(live, start + tl.minimum(m0 + BLOCK_M, eos) - bos, 0)  # keys [0, hi) are read
    lo_full = tl.minimum((first + 1) // BLOCK_N * BLOCK_N, hi)  # tiles before lo_full need no mask
    q = tl.load(q_ptr + r[:, None] * stride_qt + i_h * stride_qh + o_d[None, :], mask=m_r[:, None] & m_d[None, :], other=0.0)
    if PAGED:
        kv_base = (i_h // GROUP) * stride_kh
    else:
        kv_base = i_s * stride_ks + (i_h // GROUP) * stride_kh
    tb_row = tb_ptr + i_s * stride_tb
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    for j0 in range(0, lo_full, BLOCK_N):
        acc, m_i, l_i = _tile(q, kc_ptr, vc_ptr, tb_row, kv_base, j0, o_n, o_d, m_d, hi, pos_r, acc, m_i, l_i,
                              stride_ks, stride_kl, bs, qk_scale, False, PAGED)
    for j0 in range(lo_full, hi, BLOCK_N):
        acc, m_i, l_i = _tile(q, kc_ptr, vc_ptr, tb_row, kv_base, j0, o_n, o_d, m_d, hi, pos_r, acc, m_i, l_i,
                              stride_ks, stride_kl, bs, qk_scale, True, PAGED)
    out = round_bf16(acc / tl.where(l_i > 0, l_i, 1.0)[:, None])
    b_g = tl.load(g_ptr + r[:, None] * stride_gt + i_h * stride_gh + o_d[None, :], mask=m_r[:, None] & m_d[None, :], other=0.0)
    out = round_bf16(out * round_bf16(tl.sigmoid(b_g.to(tl.float32))))
    tl.store(o_ptr + r[:, None] * stride_ot + i_h * stride_oh + o_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=m_r[:, None] & m_d[None, :])


# ---------------------------------------------------------------- launcher
def attention_prefill_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, gate: torch.Tensor,
    cu_seqlens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, scale: float,
    block_table: torch.Tensor | None = None, *, block_m: int | None = None, block_n: int = DEFAULTS["block_n"],
    num_warps: int = DEFAULTS["num_warps"], num_stages: int = DEFAULTS["num_stages"],
) -> torch.Tensor:
    """One launch over (cdiv(T, block_m) + N, HQ) programs; returns gated bf16 [T, HQ, D].

    ``block_m`` None: ``DEFAULTS["block_m"]`` below ``LONG_T`` packed tokens, ``LONG_BLOCK_M`` from there.
    ``block_table`` None: the static layout (run as the table ``[[0], [1], ...]``).
    """
    require_triton("attention_prefill")
    t_count, hq, hd = q.shape
    if block_m is None:
        block_m = LONG_BLOCK_M if t_count >= LONG_T else DEFAULTS["block_m"]
    hkv = k_cache.shape[2]
    o = new_empty((t_count, hq, hd), q.dtype, q.device)
    n_seq = slots.shape[0]
    if t_count == 0 or n_seq == 0:
        return o
    # PAGED: 0 static (the table unused), 2 one block per key tile (block_n divides the block size), 1 a block per key
    paged = 0 if block_table is None else 2 if k_cache.shape[1] % block_n == 0 else 1
    if block_table is None:
        block_table = cu_seqlens  # not read
    grid = (max_blocks(t_count, n_seq, block_m), hq)
    _attn_prefill_kernel[grid](
        q, k_cache, v_cache, gate, cu_seqlens, positions, slots, block_table, o,
        n_seq, hd, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0),
        gate.stride(0), gate.stride(1), o.stride(0), o.stride(1), scale * LOG2E, k_cache.shape[1],
        GROUP=hq // hkv, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=triton.next_power_of_2(hd),
        BLOCK_SEQ=block_n_seq(n_seq), PAGED=paged, num_warps=num_warps, num_stages=num_stages,
    )
    return o


block_n_seq = block_n  # BLOCK_SEQ of ``locate_block`` (named apart from the key tile's BLOCK_N)


# ---------------------------------------------------------------- public op
def _check(q, k_cache, v_cache, gate, cu_seqlens, positions, slots, block_table=None) -> None:
    op = "attention_prefill"
    check_table(op, k_cache, block_table)
    if q.dim() != 3 or k_cache.dim() != 4:
        raise ValueError(f"{op}: q must be [T, HQ, D] and k_cache [NB, BS, HKV, D]; got {tuple(q.shape)}, {tuple(k_cache.shape)}")
    t, hq, hd = q.shape
    if k_cache.shape != v_cache.shape or k_cache.shape[3] != hd or hq % k_cache.shape[2]:
        raise ValueError(f"{op}: k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must match, with "
                         f"head_dim {hd} and HQ = {hq} a multiple of their HKV")
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError(f"{op}: k_cache and v_cache must be contiguous (the engine's StateCache tensors)")
    if tuple(gate.shape) != (t, hq, hd) or gate.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError(f"{op}: gate {tuple(gate.shape)} must be [T, HQ, D] = {(t, hq, hd)}, gate and q with a contiguous last dim")
    if q.dtype != k_cache.dtype or q.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"{op}: q ({q.dtype}) and the cache ({k_cache.dtype}) must both be bf16 (or fp16)")
    if positions.shape != (t,) or cu_seqlens.dim() != 1 or slots.shape != (cu_seqlens.shape[0] - 1,):
        raise ValueError(f"{op}: positions must be [T] = [{t}], cu_seqlens [N+1] and slots [N]; got "
                         f"{tuple(positions.shape)}, {tuple(cu_seqlens.shape)}, {tuple(slots.shape)}")


def attention_prefill(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, gate: torch.Tensor,
    cu_seqlens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, scale: float,
    block_table: torch.Tensor | None = None, **launch,
) -> torch.Tensor:
    """Causal GQA attention of packed queries over their slots' cached keys, times sigmoid(gate).

    Args:
        q: bf16 [T, HQ, D] (normed, roped; last dim contiguous); k_cache, v_cache: bf16 [NB, BS, HKV, D]
            contiguous, already holding this forward's K/V at ``positions``; gate: bf16 [T, HQ, D]
            (a strided view of the q projection is fine); cu_seqlens: int [N+1]; positions: int [T]
            (token t's position; a sequence's first one is its cached length); slots: int [N];
            scale: softmax scale (head_dim^-0.5); block_table: int32 [S, max_blocks] (``kv_pool.KVPool``)
            or None for the static layout (the caches [S, L, HKV, D], slot s their row s).
    Returns: bf16 [T, HQ, D] = ``attn * sigmoid(gate)``.
    Launch keywords (Triton): ``block_m``, ``block_n``, ``num_warps``, ``num_stages`` (DEFAULTS).
    Backend: Triton when ``kernels`` picks it for "attention_prefill" (CUDA tensors by default),
    else ``attention_prefill_ref``.
    Raises: ValueError on shape/dtype/layout mismatch (naming the argument).
    """
    _check(q, k_cache, v_cache, gate, cu_seqlens, positions, slots, block_table)
    if kernels._use_triton(q, "attention_prefill"):
        return attention_prefill_triton(q, k_cache, v_cache, gate, cu_seqlens, positions, slots, scale, block_table, **launch)
    return attention_prefill_ref(q, k_cache, v_cache, gate, cu_seqlens, positions, slots, scale, block_table)

"""Depthwise causal conv1d + SiLU over packed sequences (GDN prefill), fused with the conv-state update.

Math: for sequence i with inputs x_0..x_{L-1} and state s (its last W-1 inputs before this
forward, oldest first), ``y_t = silu(Σ_w weight[c, w] · in_{t-(W-1)+w})`` where ``in_j = x_j``
for j ≥ 0 and ``s[W-1+j]`` for j < 0, in fp32, rounded once to bf16; afterwards the state holds
``in_{L-(W-1)} .. in_{L-1}``. An empty sequence keeps its state.
Kernel: one program per (block of BT tokens of one sequence, block of BC channels), in parallel
over the whole packed batch (``_varlen.locate_block``: cu_seqlens read on the device, no sync);
a program walks its BT tokens in order with [BC] vectors (the W-1 earlier inputs it re-reads
are L1 hits), which keeps it light on registers.
The program that holds a sequence's first block is the only one that reads the old state, so it
also writes the new one, after its reads.
Reference: ``kernels.reference_prefill.causal_conv1d_prefill_ref`` (F.conv1d per sequence).
"""

from __future__ import annotations

import torch

from .. import kernels
from ..kernels._checks import check_conv_prefill
from ..kernels.reference_prefill import causal_conv1d_prefill_ref
from ._triton import HAVE_TRITON, require_triton, tl, triton
from ._varlen import block_n, locate_block, max_blocks

if HAVE_TRITON:
    from ..kernels._common import new_empty, round_bf16
    from ..kernels.prefill import _conv_input

#: Launch defaults (tunable through the keywords of ``causal_conv1d_prefill``).
DEFAULTS = {"block_t": 64, "block_c": 128, "num_warps": 4}  # H200, 8192 x 8192: 0.31 ms (870 GB/s); block_c 256 0.37 ms

__all__ = ["DEFAULTS", "causal_conv1d_prefill", "causal_conv1d_prefill_ref", "causal_conv1d_prefill_triton"]


@triton.jit
def _conv1d_prefill_kernel(
    x_ptr, state_ptr, w_ptr, cu_ptr, slot_ptr, y_ptr,
    N, C, stride_xt, stride_ss, stride_sc, stride_wc, stride_yt,
    W: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BLOCK_N: tl.constexpr,
):
    i_b = tl.program_id(0)
    i_c = tl.program_id(1)
    i_n, bos, eos, t0 = locate_block(cu_ptr, N, i_b, BT, BLOCK_N)
    o_c = i_c * BC + tl.arange(0, BC)
    m_c = o_c < C
    i_s = tl.load(slot_ptr + tl.minimum(i_n, N - 1)).to(tl.int64)
    p_st = state_ptr + i_s * stride_ss + o_c.to(tl.int64) * stride_sc  # [BC], oldest input first
    p_w = w_ptr + o_c.to(tl.int64) * stride_wc
    # the block's tokens one after another, channels across the threads: [BC] vectors only (rows
    # re-read by the next W-1 tokens come from L1), so no 2D gather and few registers
    for t in range(t0 - bos, tl.minimum(t0 + BT, eos) - bos):
        b_acc = tl.zeros([BC], dtype=tl.float32)
        for i_w in tl.static_range(W):
            b_in = _conv_input(x_ptr, p_st, bos, t - (W - 1) + i_w, o_c, m_c, stride_xt, W)
            b_acc += b_in * tl.load(p_w + i_w, mask=m_c, other=0.0).to(tl.float32)
        b_y = b_acc * tl.sigmoid(b_acc)
        tl.store(y_ptr + (bos + t) * stride_yt + o_c, round_bf16(b_y).to(y_ptr.dtype.element_ty), mask=m_c)
    if t0 == bos:  # the sequence's first block: new state[i] = in_{L-(W-1)+i}, read before written
        for i_w in tl.static_range(W - 1):
            i_in = eos - (W - 1) + i_w
            m_in = (o_c.to(tl.int64) * 0 + i_in) >= bos  # i_in as a vector: a scalar mask is not portable
            m_live = m_c & ((o_c.to(tl.int64) * 0 + bos) < eos)
            b_nx = tl.load(x_ptr + i_in * stride_xt + o_c, mask=m_live & m_in, other=0.0).to(tl.float32)
            b_ns = tl.load(p_st + (W - 1 + i_in - bos), mask=m_live & (~m_in), other=0.0).to(tl.float32)
            tl.store(p_st + i_w, (b_nx + b_ns).to(state_ptr.dtype.element_ty), mask=m_live)


def causal_conv1d_prefill_triton(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, cu_seqlens: torch.Tensor,
    slots: torch.Tensor, *, block_t: int = DEFAULTS["block_t"], block_c: int = DEFAULTS["block_c"],
    num_warps: int = DEFAULTS["num_warps"],
) -> torch.Tensor:
    """One launch over (cdiv(T, block_t) + N, cdiv(C, block_c)) programs; x's rows may be strided."""
    require_triton("causal_conv1d_prefill")
    t_count, c_dim = x.shape
    y = new_empty((t_count, c_dim), x.dtype, x.device)
    n_seq = slots.shape[0]
    if t_count == 0 or n_seq == 0:
        return y
    if x.stride(-1) != 1:
        x = x.contiguous()
    grid = (max_blocks(t_count, n_seq, block_t), triton.cdiv(c_dim, block_c))
    _conv1d_prefill_kernel[grid](
        x, conv_state, weight, cu_seqlens, slots, y,
        n_seq, c_dim, x.stride(0), conv_state.stride(0), conv_state.stride(1), weight.stride(0), y.stride(0),
        W=weight.shape[1], BT=block_t, BC=block_c, BLOCK_N=block_n(n_seq), num_warps=num_warps,
    )
    return y


def causal_conv1d_prefill(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, cu_seqlens: torch.Tensor,
    slots: torch.Tensor, **launch,
) -> torch.Tensor:
    """Depthwise causal conv1d + SiLU over packed sequences, continuing from ``conv_state[slots]``.

    Args: x bf16 [T, C] (last dim contiguous; rows may be strided, e.g. a column slice of
    in_proj's output); conv_state bf16 [S, C, W-1] with a contiguous last dim (zero a new
    sequence's row first); weight [C, W]; cu_seqlens int [N+1] (read on the device); slots int [N].
    Returns: y bf16 [T, C]; ``conv_state[slots[i]]`` ← the last W-1 inputs of sequence i.
    Launch keywords (Triton): ``block_t``, ``block_c`` (powers of two), ``num_warps``.
    Backend: Triton when ``kernels`` picks it for "conv1d_prefill" (CUDA tensors by
    default), else ``causal_conv1d_prefill_ref``.
    Raises: ValueError on shape mismatch (naming the argument).
    """
    check_conv_prefill(x, conv_state, weight, cu_seqlens, slots)
    if kernels._use_triton(x, "conv1d_prefill"):
        return causal_conv1d_prefill_triton(x, conv_state, weight, cu_seqlens, slots, **launch)
    return causal_conv1d_prefill_ref(x, conv_state, weight, cu_seqlens, slots)

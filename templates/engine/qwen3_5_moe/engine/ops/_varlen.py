"""Varlen block bookkeeping shared by the prefill ops, computed inside the kernels from cu_seqlens.

A packed batch of N sequences (``cu_seqlens`` int [N+1] on the device) is cut into blocks of B
tokens per sequence, numbered sequence after sequence (``ceil(len_i / B)`` blocks each). A launch
over ``cdiv(T, B) + N`` programs (an upper bound known from shapes alone, no host sync) maps
program i to its block with ``locate_block``; programs past the last block get bos = eos = 0,
so every mask they build from ``row < eos`` is false.
"""

from __future__ import annotations

from ._triton import tl, triton


@triton.jit
def locate_block(cu_ptr, N, i_b, B: tl.constexpr, BLOCK_N: tl.constexpr):
    """Block i_b → (sequence i_n, bos, eos, first token of the block); i_n = N past the last block."""
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < N
    b_lo = tl.load(cu_ptr + o_n, mask=m_n, other=0).to(tl.int64)
    b_hi = tl.load(cu_ptr + o_n + 1, mask=m_n, other=0).to(tl.int64)
    b_nb = tl.where(m_n, (b_hi - b_lo + B - 1) // B, 0)
    b_end = tl.cumsum(b_nb, 0)
    i_n = tl.sum(tl.where(m_n & (b_end <= i_b), 1, 0), 0)
    sel = o_n == i_n
    bos = tl.sum(tl.where(sel, b_lo, 0), 0)
    eos = tl.sum(tl.where(sel, b_hi, 0), 0)
    base = tl.sum(tl.where(sel, b_end - b_nb, 0), 0)
    return i_n, bos, eos, bos + (i_b - base) * B


@triton.jit
def block_base(cu_ptr, N, i_n, B: tl.constexpr, BLOCK_N: tl.constexpr):
    """Number of the first block of sequence i_n (the blocks of sequences 0..i_n-1)."""
    o_n = tl.arange(0, BLOCK_N)
    m_n = o_n < N
    b_lo = tl.load(cu_ptr + o_n, mask=m_n, other=0).to(tl.int64)
    b_hi = tl.load(cu_ptr + o_n + 1, mask=m_n, other=0).to(tl.int64)
    return tl.sum(tl.where(m_n & (o_n < i_n), (b_hi - b_lo + B - 1) // B, 0), 0)


def max_blocks(t_count: int, n_seq: int, block: int) -> int:
    """Upper bound on the blocks of any N sequences of T tokens in all: cdiv(T, B) + N."""
    return -(-t_count // block) + n_seq


def block_n(n_seq: int) -> int:
    """BLOCK_N for ``locate_block``: a power of two ≥ max(N, 2)."""
    return 1 << max(n_seq - 1, 1).bit_length()

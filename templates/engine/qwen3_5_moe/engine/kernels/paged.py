"""Reads of a paged KV cache in plain torch (the reference and SDPA paths; the Triton kernels index
the block table themselves).

A cache is bf16 [num_blocks, block_size, HKV, D]; ``table`` int32 [S, max_blocks] maps slot s,
position p to row ``p % block_size`` of block ``table[s, p // block_size]``. ``table`` None means the
static layout: the cache is [S, L, HKV, D] and slot s is its row s (the same as a table ``[[0], [1], ...]``).
"""

from __future__ import annotations

import torch


def gather_kv(cache: torch.Tensor, table: torch.Tensor | None, slot: int, n: int) -> torch.Tensor:
    """The first ``n`` positions of ``slot``: [n, HKV, D] (a view when ``table`` is None, else a gather of n rows)."""
    if table is None:
        return cache[slot, :n]
    pos = torch.arange(n, device=cache.device)
    return cache[table[slot].long()[pos // cache.shape[1]], pos % cache.shape[1]]


def check_table(op: str, cache: torch.Tensor, table: torch.Tensor | None, slots_needed: int | None = None) -> None:
    """Raise ValueError unless ``table`` is None or an int32 [S, max_blocks] tensor on the cache's device
    whose blocks (max_blocks x block_size rows) can be addressed; names ``op``."""
    if table is None:
        return
    if table.dim() != 2 or table.dtype != torch.int32 or table.device != cache.device:
        raise ValueError(f"{op}: block_table must be int32 [S, max_blocks] on {cache.device}; got "
                         f"{table.dtype} {tuple(table.shape)} on {table.device}")
    if not table.is_contiguous():
        raise ValueError(f"{op}: block_table must be contiguous")
    if slots_needed is not None and table.shape[0] < slots_needed:
        raise ValueError(f"{op}: block_table has {table.shape[0]} rows, fewer than the {slots_needed} slots asked for")

"""The KV cache of the full-attention layers: a pool of fixed-size blocks and a block table per slot.

Layout (both modes): ``k[j]``, ``v[j]`` bf16 [num_blocks, block_size, nkv, hd] for the j-th
full-attention layer, and ``block_table`` int32 [max_batch + 1, max_blocks_per_seq] on the device:
position p of slot s lives at row ``p % block_size`` of block ``block_table[s, p // block_size]``.
When paged, every reader and writer of the cache goes through the table (``kernels.paged`` for the
torch paths, the table pointer in the Triton kernels, ``locate`` for the writer); when static the
readers are given no table and index block = slot (the table there is the identity, for reference).

- static (``kv_block_size`` 0): one block of ``max_seq_len`` rows per slot, ``block_table[s, 0] = s``
  (the old per-slot layout [max_batch + 1, max_seq_len, nkv, hd], same memory, same reads);
- paged (``kv_block_size`` N): blocks of N rows shared by all slots; block 0 is the scratch block
  (never handed out): every table entry a slot does not own points at it, so padding rows of a
  CUDA-graph decode batch (scratch slot, position 0) and masked reads stay in bounds. Blocks are
  taken as a sequence grows (``reserve``) and returned on ``release``.

The table is allocated once and only written in place, so a captured CUDA graph that reads it
stays valid while sequences come and go.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PoolConfig:
    """Geometry: ``slots`` table rows (max_batch + 1), ``max_seq_len`` tokens per slot at most,
    ``block_size`` rows per block (0 = static), ``num_blocks`` in the pool (None = enough for every
    slot at ``max_seq_len``: max_batch * cdiv(max_seq_len, block_size) + 1 scratch block)."""

    slots: int
    max_seq_len: int
    block_size: int = 0
    num_blocks: int | None = None


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold ``tokens`` rows: cdiv(tokens, block_size)."""
    return -(-tokens // block_size)


class KVPool:
    """The block pool, its free list and the per-slot block lists (see the module docstring).

    Attributes:
        k, v: per full-attention layer, bf16 [num_blocks, block_size, nkv, hd].
        block_table: int32 [slots, max_blocks_per_seq] on the device (written in place only).
        block_size, num_blocks, max_blocks_per_seq, paged.
    """

    def __init__(self, cfg: PoolConfig, num_layers: int, nkv: int, hd: int, device: torch.device):
        if cfg.block_size < 0 or (cfg.block_size and cfg.block_size & (cfg.block_size - 1)):
            raise ValueError(f"kv_block_size={cfg.block_size} must be 0 (static slots) or a power of two")
        self.paged = cfg.block_size > 0
        self.device = device
        if self.paged:
            self.block_size = cfg.block_size
            self.max_blocks_per_seq = blocks_for(cfg.max_seq_len, cfg.block_size)
            full = (cfg.slots - 1) * self.max_blocks_per_seq + 1
            self.num_blocks = full if cfg.num_blocks is None else min(cfg.num_blocks, full)
            if self.num_blocks < 2:
                raise ValueError(f"the KV pool has {self.num_blocks} blocks; it needs the scratch block and at least one more "
                                 "(free GPU memory, lower kv_pool_headroom, or a smaller kv_block_size)")
            table = torch.zeros(cfg.slots, self.max_blocks_per_seq, dtype=torch.int32)
        else:
            self.block_size, self.max_blocks_per_seq, self.num_blocks = cfg.max_seq_len, 1, cfg.slots
            table = torch.arange(cfg.slots, dtype=torch.int32)[:, None]
        self.block_table = table.to(device)
        shape = (self.num_blocks, self.block_size, nkv, hd)
        self.k = [torch.zeros(shape, dtype=torch.bfloat16, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=torch.bfloat16, device=device) for _ in range(num_layers)]
        self._free = list(range(self.num_blocks - 1, 0, -1))  # pop() hands out the lowest block first
        self._owned: list[list[int]] = [[] for _ in range(cfg.slots)]

    @property
    def free_blocks(self) -> int:
        """Blocks not held by any slot (static mode: a large number, slots are the only limit)."""
        return len(self._free) if self.paged else 1 << 62

    @property
    def capacity_blocks(self) -> int:
        """Blocks a sequence can ever be given (the pool less its scratch block; huge when static)."""
        return self.num_blocks - 1 if self.paged else 1 << 62

    def blocks_new(self, tokens: int) -> int:
        """Blocks a new sequence needs for ``tokens`` rows (0 when static)."""
        return blocks_for(tokens, self.block_size) if self.paged else 0

    def blocks_short(self, slot: int, tokens: int) -> int:
        """Blocks ``slot`` still needs to hold ``tokens`` rows (0 if it has them; always 0 when static)."""
        return max(0, blocks_for(tokens, self.block_size) - len(self._owned[slot])) if self.paged else 0

    def fits(self, needs: list[tuple[int, int]]) -> bool:
        """True if the free blocks cover every (slot, tokens) of ``needs`` at once."""
        return sum(self.blocks_short(s, n) for s, n in needs) <= self.free_blocks

    def reserve(self, needs: list[tuple[int, int]]) -> None:
        """Give each (slot, tokens) of ``needs`` blocks for ``tokens`` rows; one in-place table write.

        Raises:
            ValueError: the pool cannot hold them (nothing is taken then): release finished
                sequences, or load with more free GPU memory / a lower ``kv_pool_headroom``.
        """
        if not self.paged:
            return
        short = sum(self.blocks_short(s, n) for s, n in needs)
        if short > len(self._free):
            raise ValueError(
                f"the KV block pool is full: {short} more blocks of {self.block_size} tokens needed, {len(self._free)} of "
                f"{self.num_blocks - 1} free; release finished sequences (Engine.release), wait for running ones, "
                "or load with more free memory (a lower kv_pool_headroom)"
            )
        rows, cols, ids = [], [], []
        for s, n in needs:
            for _ in range(self.blocks_short(s, n)):
                b = self._free.pop()
                rows.append(s)
                cols.append(len(self._owned[s]))
                ids.append(b)
                self._owned[s].append(b)
        if ids:
            at = torch.tensor([rows, cols], dtype=torch.int64, device=self.device)
            self.block_table[at[0], at[1]] = torch.tensor(ids, dtype=torch.int32, device=self.device)

    def release(self, slots: list[int]) -> None:
        """Return the blocks of ``slots`` to the pool and point their table rows at the scratch block."""
        if not self.paged:
            return
        freed = [s for s in slots if self._owned[s]]
        for s in freed:
            self._free.extend(self._owned[s])
            self._owned[s] = []
        if freed:
            self.block_table[torch.tensor(freed, dtype=torch.int64, device=self.device)] = 0
            self._free.sort(reverse=True)

    def locate(self, token_slots: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Where each token's K/V row goes: (block int64 [T], row in block int64 [T]), on the device,
        no host sync. Static mode returns the inputs (block = slot, row = position)."""
        if not self.paged:
            return token_slots, positions
        blocks = self.block_table[token_slots, positions // self.block_size].to(torch.int64)
        return blocks, positions % self.block_size


def pool_blocks_that_fit(free_bytes: int, headroom_pct: int, other_bytes: int, num_layers: int, block_size: int,
                         nkv: int, hd: int) -> int:
    """Blocks a pool may take from ``free_bytes`` of device memory: what is left after keeping
    ``headroom_pct`` % of it free (activations, CUDA graphs, the allocator) and ``other_bytes`` for
    the rest of the state, divided by a block's bytes (K and V, bf16, every full-attention layer)."""
    per_block = 2 * num_layers * block_size * nkv * hd * 2
    usable = free_bytes * (100 - headroom_pct) // 100 - other_bytes
    return max(0, usable // per_block)

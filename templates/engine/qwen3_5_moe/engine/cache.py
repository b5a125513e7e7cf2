"""Per-sequence state, in slots: KV cache of the full-attention layers (``kv_pool.KVPool``: static
per-slot blocks or a paged block pool), conv and recurrent state of the Gated DeltaNet layers, and
the slot table.

A slot is one live sequence. Its GDN state is allocated once for ``max_batch`` slots at load,
plus one scratch slot that is never handed out: padding rows of a CUDA-graph decode batch read
and write it. Allocating a slot zeroes its GDN state (a reused slot must not leak its previous
sequence); KV rows need no reset, as attention reads only the first ``length`` positions of a slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .kv_pool import KVPool, PoolConfig
from .target import ModelDims


@dataclass
class CacheConfig:
    """Capacity of the state: ``max_batch`` slots of ``max_seq_len`` tokens each; the KV cache in
    blocks of ``kv_block_size`` tokens (0 = one static block of max_seq_len per slot) and, when
    paged, ``kv_num_blocks`` blocks in the pool (None = enough for every slot at max_seq_len)."""

    max_batch: int
    max_seq_len: int
    kv_block_size: int = 0
    kv_num_blocks: int | None = None


class StateCache:
    """The tensors (all allocated at construction on ``device``):

    - ``k[j]``, ``v[j]``: bf16 [num_blocks, block_size, nkv, hd] for the j-th full-attention layer, read
      and written through ``block_table`` int32 [max_batch + 1, max_blocks_per_seq] (``kv_pool.KVPool``;
      static mode: [max_batch + 1, max_seq_len, nkv, hd] with ``block_table[s, 0] = s``);
    - ``conv[j]``: bf16 [max_batch + 1, conv_dim, W-1], the last W-1 conv inputs (oldest first) of
      the j-th GDN layer;
    - ``ssm[j]``: fp32 [max_batch + 1, nv, dk, dv], the gated-delta-rule state of the j-th GDN layer;
    - ``lengths``: tokens held per slot (python ints).

    ``layer_index[l]`` maps a model layer to its j in the list of its kind; ``scratch_slot``
    (= max_batch) is the row padding rows use.
    """

    def __init__(self, dims: ModelDims, cfg: CacheConfig, device: torch.device):
        if cfg.max_batch < 1 or cfg.max_seq_len < 1:
            raise ValueError(f"max_batch ({cfg.max_batch}) and max_seq_len ({cfg.max_seq_len}) must be at least 1")
        self.cfg = cfg
        self.device = device
        b, s = cfg.max_batch + 1, cfg.max_seq_len
        self.scratch_slot = cfg.max_batch
        full, lin = dims.full_attention_layers, dims.linear_attention_layers
        self.kv = KVPool(PoolConfig(b, s, cfg.kv_block_size, cfg.kv_num_blocks), len(full),
                         dims.num_key_value_heads, dims.head_dim, device)
        self.k, self.v, self.block_table = self.kv.k, self.kv.v, self.kv.block_table
        conv_shape = (b, dims.conv_dim, dims.linear_conv_kernel_dim - 1)
        ssm_shape = (b, dims.linear_num_value_heads, dims.linear_key_head_dim, dims.linear_value_head_dim)
        self.conv = [torch.zeros(conv_shape, dtype=torch.bfloat16, device=device) for _ in lin]
        self.ssm = [torch.zeros(ssm_shape, dtype=torch.float32, device=device) for _ in lin]
        self.layer_index = {l: j for j, l in enumerate(full)} | {l: j for j, l in enumerate(lin)}
        self.lengths = [0] * b
        self._free = list(range(cfg.max_batch - 1, -1, -1))  # pop() hands out the lowest slot first
        self._live: set[int] = set()

    @property
    def free_slots(self) -> int:
        """How many slots are free."""
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free slots, zero their GDN state and length, and return them.

        Raises:
            ValueError: fewer than ``n`` slots are free (release finished sequences first,
                or load with a larger ``max_batch``).
        """
        if n > len(self._free):
            raise ValueError(
                f"{n} new sequences asked for, but only {len(self._free)} of {self.cfg.max_batch} slots are free; "
                "release finished sequences (Engine.release) or load with a larger max_batch"
            )
        slots = [self._free.pop() for _ in range(n)]
        idx = torch.tensor(slots, device=self.device)
        for t in self.conv + self.ssm:
            t.index_fill_(0, idx, 0)
        for s in slots:
            self.lengths[s] = 0
            self._live.add(s)
        return slots

    @staticmethod
    def gdn_bytes(dims: ModelDims, max_batch: int) -> int:
        """Bytes of the GDN conv (bf16) and ssm (fp32) state of ``max_batch`` + 1 slots."""
        conv = dims.conv_dim * (dims.linear_conv_kernel_dim - 1) * 2
        ssm = dims.linear_num_value_heads * dims.linear_key_head_dim * dims.linear_value_head_dim * 4
        return (max_batch + 1) * len(dims.linear_attention_layers) * (conv + ssm)

    def reserve(self, needs: list[tuple[int, int]]) -> None:
        """Give each (slot, tokens) KV blocks for ``tokens`` positions (``KVPool.reserve``; a no-op when static).

        Raises:
            ValueError: the block pool cannot hold them (nothing is taken then).
        """
        self.kv.reserve(needs)

    def is_live(self, slot: int) -> bool:
        """True if ``slot`` holds a sequence."""
        return slot in self._live

    def check_live(self, slots: list[int]) -> None:
        """Check that every slot is live and none repeats.

        Raises:
            ValueError: an unknown, released or repeated slot (use the slots prefill returned).
        """
        bad = [s for s in slots if s not in self._live]
        if bad:
            raise ValueError(f"slots {bad} hold no sequence (never allocated or already released); use the slots prefill returned")
        if len(set(slots)) != len(slots):
            raise ValueError(f"slots {slots} repeat; each sequence appears once per call")

    def release(self, slots: list[int]) -> None:
        """Free live slots (and their KV blocks) for reuse.

        Raises:
            ValueError: a slot is not live or repeats (see ``check_live``).
        """
        self.check_live(slots)
        self.kv.release(slots)
        for s in slots:
            self._live.discard(s)
            self.lengths[s] = 0
            self._free.append(s)
        self._free.sort(reverse=True)

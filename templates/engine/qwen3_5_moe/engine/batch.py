"""The per-forward context: which sequences run, how their tokens are packed, where they sit.

Every layer gets the same ``Batch`` instead of threading lengths, positions and slots
through each call (mini-sglang's forward context). Tokens of all sequences are packed
along one axis T (sequence i owns rows ``cu_seqlens[i]:cu_seqlens[i+1]``); sequence i
already holds ``starts[i]`` tokens in slot ``slots[i]`` before this forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """One forward over B sequences and T packed tokens.

    Attributes:
        tokens: int64 [T] token ids, packed.
        positions: int64 [T] absolute position of each token in its sequence.
        slots: the state slot of each sequence (B python ints); ``slots_t`` the same, int64 [B] on device.
        token_slots: int64 [T], the slot of each packed token.
        starts: tokens each sequence held before this forward (B ints).
        lens: new tokens of each sequence in this forward (B ints, each ≥ 1).
        cu_seqlens: B+1 prefix sums of ``lens`` (python ints); ``cu_t`` the same, int64 [B+1] on device.
        decode: True when every sequence brings exactly one token and the step runs the
            recurrent (decode) forms of the ops.
        n_valid: int32 [1] on device, or None: rows t ≥ n_valid are padding (CUDA-graph decode
            batches) and the MoE routes them to no expert; None = every row is real.
    """

    tokens: torch.Tensor
    positions: torch.Tensor
    slots: list[int]
    slots_t: torch.Tensor
    token_slots: torch.Tensor
    starts: list[int]
    lens: list[int]
    cu_seqlens: list[int]
    cu_t: torch.Tensor
    decode: bool
    n_valid: torch.Tensor | None = None

    @property
    def num_seqs(self) -> int:
        """B."""
        return len(self.slots)

    @property
    def last_rows(self) -> list[int]:
        """Row in the packed T axis of each sequence's last token."""
        return [c - 1 for c in self.cu_seqlens[1:]]


def make_batch(
    seqs: list[list[int]], slots: list[int], starts: list[int], device: torch.device, *, decode: bool = False
) -> Batch:
    """Pack ``seqs`` (new token ids per sequence, each non-empty) into a ``Batch`` on ``device``."""
    lens = [len(s) for s in seqs]
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    flat = [t for s in seqs for t in s]
    positions = [p for st, n in zip(starts, lens) for p in range(st, st + n)]
    return Batch(
        tokens=torch.tensor(flat, dtype=torch.int64, device=device),
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        slots=list(slots),
        slots_t=torch.tensor(slots, dtype=torch.int64, device=device),
        token_slots=torch.tensor([s for s, n in zip(slots, lens) for _ in range(n)], dtype=torch.int64, device=device),
        starts=list(starts),
        lens=lens,
        cu_seqlens=cu,
        cu_t=torch.tensor(cu, dtype=torch.int64, device=device),
        decode=decode,
    )

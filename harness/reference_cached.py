"""HF's own consistency: the reference's cached path against its own uncached forward, on the rows both computed.

The engine's consistency check (docs/PARITY.md, "Consistency") compares its teacher-forced logits (prefill, then
one decode step per token) with its own one-pass prefill of the same tokens. HF does the same two things when
``Reference.run`` drafts a continuation with its KV/recurrent cache and then checks it with one uncached forward,
so each run measures HF's figure on the very prompts the engine is judged on, at no extra forward. On a bfloat16
reference this is the anchor of the engine's consistency threshold on a GPU (``Tolerance.consistency_threshold``);
on a float32 one it is ~1e-6 and changes nothing.

Only per-row squares cross the worker pipe: a full-size row is 248,320 floats.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass(frozen=True)
class CachedRows:
    """Per row, ``‖c − u‖²`` (cached row c, uncached row u) and ``‖u‖²``, float64 [R] each on CPU.

    Attributes:
        prefill_err2, prefill_ref2: the prompt rows kept (``ReferenceRun.rows``) of the cached path's prefix forward
            over the prompt alone, against the uncached forward over prompt + continuation.
        decode_err2, decode_ref2: each single-token cached step (positions P .. P + n - 2: the last continuation
            token is never fed) against the uncached forward's row at that position.
    """

    prefill_err2: torch.Tensor
    prefill_ref2: torch.Tensor
    decode_err2: torch.Tensor
    decode_ref2: torch.Tensor

    def part(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """``(err2, ref2)`` of ``prefill`` or ``decode``.

        Raises:
            ValueError: another name.
        """
        if name not in ("prefill", "decode"):
            raise ValueError(f"CachedRows has parts prefill and decode, not {name!r}")
        return getattr(self, f"{name}_err2"), getattr(self, f"{name}_ref2")

    def to_wire(self) -> dict[str, torch.Tensor]:
        """The four tensors by field name, for the worker's reply."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_wire(cls, d: dict | None) -> CachedRows | None:
        """Inverse of :meth:`to_wire` (None stays None).

        Raises:
            ValueError: a field is missing or the lengths of a part differ.
        """
        if d is None:
            return None
        try:
            out = cls(**{f.name: torch.as_tensor(d[f.name], dtype=torch.float64).reshape(-1) for f in fields(cls)})
        except KeyError as err:
            raise ValueError(f"cached rows lack {err}") from None
        for name in ("prefill", "decode"):
            e, r = out.part(name)
            if e.shape != r.shape:
                raise ValueError(f"cached rows: {name} has {e.numel()} errors for {r.numel()} reference rows")
        return out


def cached_rows(cached: dict[int, torch.Tensor], logits: torch.Tensor, positions: list[int], prompt_len: int) -> CachedRows:
    """Pair each cached row with the uncached row of the same position.

    Args:
        cached: {position: cached logits row, float32 [V]}; positions < ``prompt_len`` come from the prefix forward.
        logits: the uncached forward's rows, float32 [len(positions), V] on CPU.
        positions: the position of each row of ``logits``, ascending.
        prompt_len: P; rows at positions ≥ P are decode rows.
    Raises:
        ValueError: ``logits`` and ``positions`` disagree in length, or a row's vocabulary differs.
    """
    if logits.shape[0] != len(positions):
        raise ValueError(f"{logits.shape[0]} uncached rows for {len(positions)} positions")
    parts: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
    for i, pos in enumerate(positions):
        row = cached.get(pos)
        if row is None:
            continue
        if row.shape != logits[i].shape:
            raise ValueError(f"cached row of position {pos} has shape {tuple(row.shape)}, uncached {tuple(logits[i].shape)}")
        u = logits[i].double()
        err, ref = parts[pos >= prompt_len]
        err.append(float((row.double() - u).pow(2).sum()))
        ref.append(float(u.pow(2).sum()))
    return CachedRows(_f64(parts[False][0]), _f64(parts[False][1]), _f64(parts[True][0]), _f64(parts[True][1]))


def _f64(xs: list[float]) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)

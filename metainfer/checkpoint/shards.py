"""Streaming safetensors shard writer: tensors go to disk shard by shard, never all in memory."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

INDEX = "model.safetensors.index.json"


class ShardWriter:
    """Collects tensors until a shard reaches ``max_bytes``, then writes it and forgets them.

    Shards are written as ``model-<k>.tmp.safetensors`` and renamed to the HF names
    ``model-0000k-of-0000n.safetensors`` by ``close()``, which also writes
    ``model.safetensors.index.json`` (``metadata.total_size`` in bytes and ``weight_map``).
    Peak memory: one shard plus the tensor being added. A tensor larger than
    ``max_bytes`` gets a shard of its own.
    """

    def __init__(self, out: Path, max_bytes: int) -> None:
        self.out, self.max_bytes = Path(out), max_bytes
        self._pending: dict[str, torch.Tensor] = {}
        self._pending_bytes = 0
        self._shards: list[list[str]] = []
        self._names: set[str] = set()
        self.total_bytes = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Queue one tensor (made contiguous, on CPU); flush the shard first if it would overflow.

        Raises:
            ValueError: the name was already written.
        """
        if name in self._names:
            raise ValueError(f"tensor {name!r} written twice")
        self._names.add(name)
        nbytes = tensor.numel() * tensor.element_size()
        if self._pending and self._pending_bytes + nbytes > self.max_bytes:
            self._flush()
        self._pending[name] = tensor.detach().cpu().contiguous()
        self._pending_bytes += nbytes
        self.total_bytes += nbytes

    def _tmp(self, k: int) -> Path:
        return self.out / f"model-{k:05d}.tmp.safetensors"

    def _flush(self) -> None:
        if not self._pending:
            return
        save_file(self._pending, str(self._tmp(len(self._shards))), metadata={"format": "pt"})
        self._shards.append(list(self._pending))
        self._pending, self._pending_bytes = {}, 0

    def close(self) -> dict[str, str]:
        """Write the last shard, rename all shards to their final names, write the index; returns the weight map."""
        self._flush()
        n = len(self._shards)
        weight_map: dict[str, str] = {}
        for k, names in enumerate(self._shards):
            final = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
            self._tmp(k).rename(self.out / final)
            weight_map.update({name: final for name in names})
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": weight_map}
        (self.out / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return weight_map

"""Decode steps replayed from CUDA graphs (nano-vllm's ``capture_cudagraph``), one graph per batch size.

At batch 1 a decode step is ~30 small kernels per layer; launched eagerly from Python that is
latency, not bandwidth. Each captured size B has static inputs (tokens, positions, slots [B]);
a step with n ≤ B live sequences copies its inputs into the first n rows, points the padding
rows at the cache's scratch slot (whose block-table row points at the scratch block when the KV
is paged; the table itself is written in place between steps, so the graphs stay valid), sets the static ``n_valid`` to n, replays, and reads the first
n rows of the static logits. The MoE path of a size is fixed when it is captured, by the padded
size B (``moe.moe_path``: ``ops.moe_fused`` from ``moe_ops_min_tokens`` on, whose padding rows
route to no expert, so a batch of 17 in the 24 graph reads 17 tokens' experts; below it
``kernels.moe_nvfp4``, which routes padding rows like real ones, as before the new op).
Graphs are captured largest first into one memory pool.

Capturable only when the decode step never reads device values on the host: decode attention
through the split-K kernel (tunable ``attention_decode_splits > 0``, lengths read on the
device) and NVFP4 experts (``kernels.moe_nvfp4``; the bf16 expert loop reads counts on the
host). On by default for NVFP4 targets on a GPU (``cuda_graph_max_batch = 128``, sizes
``GRAPH_BUCKETS``, rendered into tunables.json; at 32 checked on an H200 2026-11-30: graph decode
equals eager). On CPU the
same static, padded path runs eagerly (that is how the tests check the padding logic).
"""

from __future__ import annotations

import torch

from .batch import Batch
from .cache import StateCache
from .model import Model


#: Decode batch sizes captured as graphs (a step of n sequences replays the smallest size ≥ n):
#: powers of two to 16, then steps of about 1.5× so padding stays under a third of a batch.
GRAPH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)


def graph_sizes(max_graph_batch: int, max_batch: int) -> list[int]:
    """Captured batch sizes: the ``GRAPH_BUCKETS`` below min(max_graph_batch, max_batch), and that bound."""
    top = min(max_graph_batch, max_batch)
    sizes = [b for b in GRAPH_BUCKETS if b < top]
    return sizes + [top] if top >= 1 else []


class DecodeGraphs:
    """Static decode batches (and, on CUDA, their captured graphs) for the sizes of ``graph_sizes``."""

    def __init__(self, model: Model, cache: StateCache, sizes: list[int], device: torch.device):
        if device.type == "cuda":
            if model.tunables.attention_decode_splits == 0:
                raise ValueError(
                    "cuda_graph_max_batch > 0 needs attention_decode_splits > 0 in tunables.json "
                    "(the SDPA decode path reads lengths on the host and cannot be captured)"
                )
            if model.dims.quant != "nvfp4":
                raise ValueError(
                    "cuda_graph_max_batch > 0 needs NVFP4 experts (kernels.moe_nvfp4); the bf16 expert loop reads "
                    "expert counts on the host. Set cuda_graph_max_batch to 0 for this target"
                )
        self.model, self.cache, self.device = model, cache, device
        self.sizes = sorted(sizes)
        scratch = cache.scratch_slot
        self.inputs = {
            b: (
                torch.zeros(b, dtype=torch.int64, device=device),  # tokens
                torch.zeros(b, dtype=torch.int64, device=device),  # positions
                torch.full((b,), scratch, dtype=torch.int64, device=device),  # slots
            )
            for b in self.sizes
        }
        # real rows of the current step: padding rows route to no expert (moe_forward's n_valid)
        self.n_valid = {b: torch.full((1,), b, dtype=torch.int32, device=device) for b in self.sizes}
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.logits: dict[int, torch.Tensor] = {}
        if device.type == "cuda":
            self._capture()

    def _batch(self, b: int, starts: list[int] | None = None, slots_list: list[int] | None = None) -> Batch:
        """The static batch of size b; ``starts``/``slots_list`` (host copies of the inputs) only
        for the eager path, whose SDPA attention reads lengths on the host."""
        tokens, positions, slots = self.inputs[b]
        return Batch(
            tokens=tokens, positions=positions, slots=slots_list or [self.cache.scratch_slot] * b, slots_t=slots,
            token_slots=slots, starts=starts or [0] * b, lens=[1] * b, cu_seqlens=list(range(b + 1)),
            cu_t=torch.arange(b + 1, device=self.device), decode=True, n_valid=self.n_valid[b],
        )

    def _capture(self) -> None:
        pool = None
        for b in reversed(self.sizes):
            batch = self._batch(b)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up: Triton compiles, allocator settles
                for _ in range(2):
                    self.model.forward(batch, self.cache)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.logits[b] = self.model.forward(batch, self.cache).logits
            pool = graph.pool()
            self.graphs[b] = graph
        torch.cuda.synchronize()

    def covers(self, n: int) -> bool:
        """True if a decode of n sequences fits a captured size."""
        return bool(self.sizes) and n <= self.sizes[-1]

    def run(self, tokens: list[int], positions: list[int], slots: list[int]) -> torch.Tensor:
        """One decode step for n ≤ max size sequences; returns fp32 logits [n, V] (a fresh tensor)."""
        n = len(tokens)
        b = next(s for s in self.sizes if s >= n)
        t_tok, t_pos, t_slot = self.inputs[b]
        fill = b - n
        positions, slots = positions + [0] * fill, slots + [self.cache.scratch_slot] * fill
        t_tok.copy_(torch.tensor(tokens + [0] * fill, dtype=torch.int64))
        t_pos.copy_(torch.tensor(positions, dtype=torch.int64))
        t_slot.copy_(torch.tensor(slots, dtype=torch.int64))
        self.n_valid[b].fill_(n)
        if b in self.graphs:
            self.graphs[b].replay()
            return self.logits[b][:n].clone()
        return self.model.forward(self._batch(b, positions, slots), self.cache).logits[:n]

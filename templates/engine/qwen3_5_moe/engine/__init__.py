"""Inference engine for one target (model, weight format, GPU); public API only.

The harness calls exactly this (docs/CONTRACTS.md, "The engine")::

    engine = load(checkpoint, device="cuda", max_batch=64, max_seq_len=4096)
    res = engine.prefill(prompts)                  # new sequences; res.slots, res.logits [T_i, V] fp32
    res = engine.prefill(more, slots=res.slots)    # continue them (chunked prefill)
    logits = engine.decode(res.slots, next_tokens) # [B, V] fp32
    engine.release(res.slots)
    outs = engine.generate(prompts, SamplingParams(max_tokens=256, ignore_eos=True))
    engine.warmup()                                # compile each batch-shape class before serving
    sched = Scheduler(engine)                      # step API (metainfer serve): add_request / step / abort

See ENGINE.md beside the package for the file map.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .cache import CacheConfig
from .runtime import Engine, PrefillResult
from .sampling import SamplingParams
from .scheduler import Scheduler
from .sequence import StepOutput
from .target import DIMS, ModelDims

__all__ = ["DIMS", "Engine", "ModelDims", "PrefillResult", "SamplingParams", "Scheduler", "StepOutput", "load"]


def _device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but CUDA is not available here; pass device='cpu'")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise ValueError(f"device {device!r} is not supported; use 'cuda', 'cuda:N' or 'cpu'")
    return dev


def load(
    checkpoint: str | Path, device: str | torch.device = "cuda", *, max_batch: int = 64, max_seq_len: int = 4096,
    kv_block_size: int | None = None, kv_num_blocks: int | None = None,
) -> Engine:
    """Load a checkpoint folder onto ``device`` and allocate state for ``max_batch`` sequences
    of up to ``max_seq_len`` tokens each.

    ``kv_block_size``: None = the tunable ``kv_block_size`` (0 = static per-slot KV, N = paged KV in
    N-token blocks); ``kv_num_blocks``: the paged pool's size in blocks (None = from free memory on
    CUDA, enough for max_batch x max_seq_len elsewhere).

    Raises:
        ValueError: unavailable or unsupported device; max_batch/max_seq_len < 1 or
            max_seq_len above the model's max_position_embeddings; a checkpoint whose config
            or format does not match this rendered engine (re-render for it); bad tunables.json.
        metainfer.errors.CheckpointError: missing or mis-shaped tensors (from the reader).
    """
    from metainfer.checkpoint import CheckpointReader

    from .tunables import load_tunables
    from .weights import load_weights

    dev = _device(device)
    if max_batch < 1 or max_seq_len < 1:
        raise ValueError(f"max_batch={max_batch} and max_seq_len={max_seq_len} must both be at least 1")
    if max_seq_len > DIMS.max_position_embeddings:
        raise ValueError(f"max_seq_len={max_seq_len} exceeds the model's max_position_embeddings={DIMS.max_position_embeddings}")
    tunables = load_tunables()
    weights = load_weights(CheckpointReader(checkpoint), dev)
    block = tunables.kv_block_size if kv_block_size is None else kv_block_size
    return Engine(weights, DIMS, tunables, dev, CacheConfig(max_batch, max_seq_len, block, kv_num_blocks))

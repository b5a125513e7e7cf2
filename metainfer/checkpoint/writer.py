"""Write a synthetic checkpoint with seeded random weights in exactly the real HF layout.

DESIGN.md "Checkpoint": where no real checkpoint is present, the pipeline writes one, so the
same loading code serves both. Layout: ``metainfer.checkpoint.layout``; weights:
``metainfer.checkpoint.init``; NVFP4: ``metainfer.formats.nvfp4`` (ModelOpt recipe).
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import math
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from tqdm import tqdm

from metainfer.checkpoint.generate import GenContext, materialize
from metainfer.checkpoint.init import INIT_VERSION
from metainfer.checkpoint.layout import TEXT_PREFIX, gdn_fp32, model_params, param_tensors, stored_name
from metainfer.checkpoint.shards import INDEX, ShardWriter
from metainfer.checkpoint.tokenizer import write_tokenizer
from metainfer.errors import CheckpointError
from metainfer.targets.models import ModelSpec
from metainfer.targets.quant import QuantSpec

FULL_SHARD_BYTES = 4 * 10**9
#: synthetic checkpoints only: ``{"init_version": metainfer.checkpoint.init.INIT_VERSION, "seed": S}``
METADATA = "metainfer.json"
TINY_SHARD_BYTES = 2 * 2**20


def quantization_ignore(model: ModelSpec) -> list[str]:
    """Module patterns left unquantized by the NVFP4 format (fnmatch wildcards, as ModelOpt writes them)."""
    p = TEXT_PREFIX
    return [
        "lm_head", "model.visual*", "mtp*",
        f"{p}layers.*.linear_attn*", f"{p}layers.*.self_attn*",
        f"{p}layers.*.mlp.gate", f"{p}layers.*.mlp.shared_expert_gate",
    ]


def checkpoint_config(model: ModelSpec, quant: QuantSpec) -> tuple[dict, dict | None]:
    """``config.json`` (the model's full config, + ``quantization_config`` for NVFP4) and the
    legacy ModelOpt ``hf_quant_config.json`` (None for bf16).

    config.json's ModelOpt block lists unquantized modules under ``ignore``; the legacy file
    (ModelOpt ``export_hf_checkpoint``) under ``quantization.exclude_modules``. Patterns are
    fnmatch wildcards over on-disk module names.
    """
    config = copy.deepcopy(model.config)
    if not quant.quantized:
        return config, None
    ignore = quantization_ignore(model)
    config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ignore}
    legacy = {
        "producer": {"name": "modelopt", "version": "synthetic (metainfer)"},
        "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16, "exclude_modules": ignore},
    }
    return config, legacy


def _prepare(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"{out} exists and is not a folder; pick another --out")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise CheckpointError(f"{out} is not empty; pick an empty folder or pass --force to overwrite its checkpoint files")
        for f in [*out.glob("model*.safetensors"), out / INDEX, out / "config.json", out / "hf_quant_config.json", out / METADATA]:
            f.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def checkpoint_bytes(model: ModelSpec, quant: QuantSpec, convention: str = "modelopt") -> int:
    """Bytes of tensor data a checkpoint of ``model`` in ``quant`` holds (what ``write_checkpoint`` streams)."""
    params = model_params(model.text, gdn_fp32=gdn_fp32(model))
    return sum(math.prod(s.shape) * s.dtype.itemsize for p in params for s in param_tensors(p, quant, convention=convention).values())


def _remove_partial(out: Path, created: bool) -> list[str]:
    """Remove what an interrupted write left in ``out``: the whole folder when the write created it, else the
    checkpoint files (shards, temporary shards, index, configs); returns what was removed."""
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return [str(out)]
    gone = []
    for f in [*out.glob("model*.safetensors"), out / INDEX, out / "config.json", out / "hf_quant_config.json",
              out / "metainfer.json"]:
        if f.is_file():
            f.unlink(missing_ok=True)
            gone.append(f.name)
    return gone


def _clean_on_interrupt(fn):
    """Wrap ``write_checkpoint``: on Ctrl-C (or any error) remove the partial files, say so on stderr, re-raise."""

    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = Path(sig.bind(*args, **kwargs).arguments["out"])
        created = not out.exists()
        try:
            return fn(*args, **kwargs)
        except BaseException as err:
            if isinstance(err, CheckpointError) and not created and not any(out.glob("model*.tmp.safetensors")):
                raise  # refused before writing (a non-empty folder without --force): nothing of ours to remove
            gone = _remove_partial(out, created)
            what = "interrupted" if isinstance(err, KeyboardInterrupt) else f"failed ({type(err).__name__})"
            if gone:
                print(f"\ncheckpoint write {what}: removed the partial checkpoint "
                      f"{'folder ' + str(out) if created else 'files in ' + str(out)}", file=sys.stderr, flush=True)
            raise

    return wrapper


@_clean_on_interrupt
def write_checkpoint(
    model: ModelSpec,
    quant: QuantSpec,
    out: Path,
    seed: int,
    *,
    force: bool = False,
    shard_bytes: int | None = None,
    convention: str = "modelopt",
    progress: bool = True,
    device: str | torch.device | None = None,
    fused_experts: bool | None = None,
) -> Path:
    """Write a checkpoint of ``model`` in format ``quant`` with seeded random weights into ``out``.

    Streams tensor by tensor (peak memory about one shard, 4 GB for full size, plus one
    layer's experts: a full-width layer peaked at 4.3 GB RSS with 1 GB shards), in the
    layout ``expected_tensors(model, quant, convention=convention)`` gives, with a tqdm bar
    over bytes. Full size is about 71 GB bf16 / 25 GB NVFP4 (MTP head included).

    Args:
        out: the folder; created if missing.
        seed: weights depend only on (seed, tensor name), never on order.
        force: overwrite the checkpoint files of a non-empty folder (others are left alone).
        shard_bytes: shard size bound; default 4 GB, 2 MiB for a tiny model.
        convention: ``modelopt`` (the format's files) or ``compressed-tensors`` (NVFP4 tensors
            named ``weight_packed``/``weight_global_scale`` and a compressed-tensors
            ``quantization_config``; for testing the reader on that convention).
        device: where NVFP4 quantization runs; default CUDA when present, else CPU (same
            bytes either way). Weights are always drawn on the CPU, experts in parallel threads.
        fused_experts: store routed experts fused (True) or per expert (False); None = as the
            real checkpoints do (fused bf16, unfused NVFP4). Fused NVFP4 raises ValueError.
    Returns:
        ``out``.
    Raises:
        CheckpointError: ``out`` is not empty and ``force`` is False, or is a file.
    """
    out = Path(out)
    _prepare(out, force)
    params = model_params(model.text, gdn_fp32=gdn_fp32(model))
    shard_bytes = shard_bytes or (TINY_SHARD_BYTES if model.tiny else FULL_SHARD_BYTES)
    total = sum(
        math.prod(s.shape) * s.dtype.itemsize
        for p in params
        for s in param_tensors(p, quant, convention=convention, fused_experts=fused_experts).values()
    )
    writer = ShardWriter(out, shard_bytes)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    workers = 1 if model.tiny else min(16, os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool, tqdm(
        total=total, unit="B", unit_scale=True, desc=f"{model.name} {quant.name}", disable=not progress
    ) as bar:
        ctx = GenContext(quant, seed, convention, device, pool if workers > 1 else None, fused_experts)
        for p in params:
            for name, tensor in materialize(p, ctx):
                writer.add(stored_name(name), tensor)
                bar.update(tensor.numel() * tensor.element_size())
    writer.close()
    config, legacy = checkpoint_config(model, quant)
    if quant.quantized and convention == "compressed-tensors":
        from metainfer.checkpoint.compressed import compressed_tensors_config

        config["quantization_config"], legacy = compressed_tensors_config(quantization_ignore(model)), None
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_tokenizer(model, out)  # tokenizer.json, tokenizer_config.json (chat template), generation_config.json
    if legacy is not None:
        (out / "hf_quant_config.json").write_text(json.dumps(legacy, indent=2) + "\n")
    (out / METADATA).write_text(json.dumps({"init_version": INIT_VERSION, "seed": seed}) + "\n")
    return out

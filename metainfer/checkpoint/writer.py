"""Write a synthetic checkpoint with seeded random weights in exactly the real HF layout.

DESIGN.md "Checkpoint": where no real checkpoint is present, the pipeline writes one, so the
same loading code serves both. Layout: ``metainfer.checkpoint.layout``; weights:
``metainfer.checkpoint.init``; NVFP4: ``metainfer.formats.nvfp4`` (ModelOpt recipe).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Iterator

import torch
from tqdm import tqdm

from metainfer.checkpoint.init import init_dense, init_expert
from metainfer.checkpoint.layout import (
    TEXT_PREFIX, Param, gdn_fp32, is_quantized_module, model_params, param_tensors, stored_name,
)
from metainfer.checkpoint.shards import INDEX, ShardWriter
from metainfer.errors import CheckpointError
from metainfer.formats.nvfp4 import E2M1_MAX, E4M3_MAX, global_to_compressed_tensors, quantize
from metainfer.targets.models import ModelSpec
from metainfer.targets.quant import QuantSpec

FULL_SHARD_BYTES = 4 * 10**9
TINY_SHARD_BYTES = 2 * 2**20
#: activation amax the synthetic ``input_scale`` stands for (only W4A4 kernels read it).
INPUT_AMAX = 8.0


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
    under ``quantization.exclude_modules`` (ModelOpt ``export_hf_checkpoint``; vLLM
    ``ModelOptNvFp4Config`` reads both).
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


def _nvfp4(module: str, dense: torch.Tensor, convention: str) -> Iterator[tuple[str, torch.Tensor]]:
    q = quantize(dense)
    input_scale = torch.tensor(INPUT_AMAX / (E2M1_MAX * E4M3_MAX), dtype=torch.float32)
    if convention == "modelopt":
        yield from ((f"{module}.weight", q.weight), (f"{module}.weight_scale", q.weight_scale),
                    (f"{module}.weight_scale_2", q.weight_scale_2), (f"{module}.input_scale", input_scale))
    else:
        yield from ((f"{module}.weight_packed", q.weight), (f"{module}.weight_scale", q.weight_scale),
                    (f"{module}.weight_global_scale", global_to_compressed_tensors(q.weight_scale_2)),
                    (f"{module}.input_global_scale", global_to_compressed_tensors(input_scale)))


def materialize(p: Param, quant: QuantSpec, seed: int, convention: str = "modelopt") -> Iterator[tuple[str, torch.Tensor]]:
    """Generate the stored tensors (canonical names) of one parameter, one at a time.

    Dense weights are drawn in fp32 and rounded to bf16; an NVFP4 weight is
    ``quantize(bf16 weight)``, so the bf16 and NVFP4 checkpoints of one seed agree.
    Fused experts are filled expert by expert into one [E, 2I, H] / [E, H, I] bf16 tensor.
    """
    layout = param_tensors(p, quant, convention=convention)
    if p.kind != "experts":
        dense = init_dense(p.name, p.shape, p.kind, seed).to(torch.bfloat16)
        if p.name in layout and layout[p.name].dtype != torch.uint8:
            yield p.name, dense.to(layout[p.name].dtype)
        else:
            yield from _nvfp4(p.name[: -len(".weight")], dense, convention)
        return
    e, i, h = p.shape
    if f"{p.name}.gate_up_proj" in layout:
        gate_up = torch.empty(e, 2 * i, h, dtype=torch.bfloat16)  # [E, 2I, H], gate rows first
        for x in range(e):
            gate_up[x, :i] = init_expert(p.name, x, "gate_proj", (i, h), seed)
            gate_up[x, i:] = init_expert(p.name, x, "up_proj", (i, h), seed)
        yield f"{p.name}.gate_up_proj", gate_up
        del gate_up
        down = torch.empty(e, h, i, dtype=torch.bfloat16)  # [E, H, I]
        for x in range(e):
            down[x] = init_expert(p.name, x, "down_proj", (h, i), seed)
        yield f"{p.name}.down_proj", down
        return
    quantized = is_quantized_module(quant, f"{p.name}.0.gate_proj")
    for x in range(e):
        for proj, shape in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
            module = f"{p.name}.{x}.{proj}"
            dense = init_expert(p.name, x, proj, shape, seed).to(torch.bfloat16)
            yield from (_nvfp4(module, dense, convention) if quantized else [(f"{module}.weight", dense)])


def _prepare(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"{out} exists and is not a folder; pick another --out")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise CheckpointError(f"{out} is not empty; pick an empty folder or pass --force to overwrite its checkpoint files")
        for f in [*out.glob("model*.safetensors"), out / INDEX, out / "config.json", out / "hf_quant_config.json"]:
            f.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


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
) -> Path:
    """Write a checkpoint of ``model`` in format ``quant`` with seeded random weights into ``out``.

    Streams tensor by tensor (peak memory about one shard, 4 GB for full size), in the
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
        math.prod(s.shape) * s.dtype.itemsize for p in params for s in param_tensors(p, quant, convention=convention).values()
    )
    writer = ShardWriter(out, shard_bytes)
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"{model.name} {quant.name}", disable=not progress) as bar:
        for p in params:
            for name, tensor in materialize(p, quant, seed, convention):
                writer.add(stored_name(name), tensor)
                bar.update(tensor.numel() * tensor.element_size())
    writer.close()
    config, legacy = checkpoint_config(model, quant)
    if quant.quantized and convention == "compressed-tensors":
        from metainfer.checkpoint.compressed import compressed_tensors_config

        config["quantization_config"], legacy = compressed_tensors_config(quantization_ignore(model)), None
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if legacy is not None:
        (out / "hf_quant_config.json").write_text(json.dumps(legacy, indent=2) + "\n")
    return out

"""Read an HF-format checkpoint of Qwen3.5/3.6-MoE lazily: bf16, NVFP4 ModelOpt, NVFP4 compressed-tensors.

Accepts the multimodal names (``model.language_model.*``, real checkpoints) and the text-only
ones (``model.*``, ``Qwen3_5MoeForCausalLM.save_pretrained``); ignores ``model.visual.*`` and
``mtp.*``; accepts routed experts fused (``mlp.experts.gate_up_proj`` [E, 2I, H]) or unfused
(``mlp.experts.<e>.{gate,up,down}_proj``). Tensors are read one at a time through
``safetensors.safe_open``; nothing is loaded up front. API: docs/CONTRACTS.md "Checkpoints".
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from metainfer.checkpoint.layout import IGNORED_PREFIXES, TEXT_ONLY_PREFIX, TEXT_PREFIX
from metainfer.checkpoint.shards import INDEX
from metainfer.checkpoint.weights import Bf16Linear, ExpertWeights, NvFp4Linear
from metainfer.errors import CheckpointError
from metainfer.formats.nvfp4 import global_from_compressed_tensors


def _detect_convention(config: dict, path: Path, names: set[str]) -> str | None:
    qc = config.get("quantization_config")
    if qc is None and (path / "hf_quant_config.json").exists():
        qc = {"quant_method": "modelopt", **json.loads((path / "hf_quant_config.json").read_text()).get("quantization", {})}
    if qc is None:
        if any(n.endswith(".weight_packed") for n in names):
            return "compressed-tensors"
        return "modelopt" if any(n.endswith(".weight_scale_2") for n in names) else None
    method = qc.get("quant_method")
    if method == "modelopt" and qc.get("quant_algo") in ("NVFP4", "MIXED_PRECISION"):
        return "modelopt"
    formats = {qc.get("format")} | {g.get("format") for g in qc.get("config_groups", {}).values()}
    if method == "compressed-tensors" and "nvfp4-pack-quantized" in formats:
        return "compressed-tensors"
    raise CheckpointError(
        f"{path}: unsupported quantization_config (quant_method={method!r}, quant_algo/format="
        f"{qc.get('quant_algo') or sorted(f for f in formats if f)}); supported: bf16, NVFP4 (ModelOpt), "
        "NVFP4 compressed-tensors (nvfp4-pack-quantized)"
    )


class CheckpointReader:
    """Lazy reader of one checkpoint folder.

    Attributes:
        path: the folder. config: the full config.json dict. text_config: its ``text_config``
            (the config itself for a text-only checkpoint). quant: ``"bf16"`` or ``"nvfp4"``.
        convention: None (bf16), ``"modelopt"`` or ``"compressed-tensors"``.
        prefix: the text-weight prefix found, ``model.language_model.`` or ``model.``.
        fused_experts: True if routed experts are stored fused.

    Raises (constructor):
        CheckpointError: no folder, no config.json, no safetensors files, an index naming a
            missing shard, or an unsupported quantization.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._handles: dict[str, object] = {}
        if not (self.path / "config.json").is_file():
            raise CheckpointError(
                f"{self.path}: no config.json; point at an HF checkpoint folder or write one with `metainfer checkpoint`"
            )
        self.config = _read_json(self.path / "config.json")
        self.text_config = self.config.get("text_config", self.config)
        self._file_of = self._list_tensors()
        stored = set(self._file_of)
        self.prefix = TEXT_PREFIX if any(n.startswith(TEXT_PREFIX) for n in stored) else TEXT_ONLY_PREFIX
        self._stored: dict[str, str] = {}  # canonical → on-disk name
        self._extra: list[str] = []  # names outside the text model, neither ignored nor lm_head
        for n in stored:
            if n.startswith(IGNORED_PREFIXES):
                continue
            if n.startswith("lm_head."):
                self._stored[n] = n
            elif n.startswith(self.prefix):
                self._stored[n[len(self.prefix):]] = n
            else:
                self._extra.append(n)
        self.convention = _detect_convention(self.config, self.path, stored)
        self.quant = "bf16" if self.convention is None else "nvfp4"
        self.fused_experts = any(n.endswith("mlp.experts.gate_up_proj") for n in self._stored)

    def _list_tensors(self) -> dict[str, str]:
        index = self.path / INDEX
        if index.is_file():
            weight_map = _read_json(index).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{index}: no 'weight_map'; rewrite the index or the checkpoint")
            missing = sorted({f for f in weight_map.values() if not (self.path / f).is_file()})
            if missing:
                raise CheckpointError(f"{self.path}: {INDEX} names shards that are not there: {missing}; copy them or rewrite the checkpoint")
            for file in sorted(set(weight_map.values())):  # headers only: cheap, and a damaged shard fails here, by name
                keys = set(self._open(file).keys())
                absent = sorted(n for n, f in weight_map.items() if f == file and n not in keys)
                if absent:
                    raise CheckpointError(
                        f"{self.path / file}: {len(absent)} tensors the index places there are not in it (first: {absent[0]}); "
                        "the shard is damaged or stale: rewrite the checkpoint (`metainfer checkpoint ... --force`) or copy it again"
                    )
            return dict(weight_map)
        files = sorted(self.path.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{self.path}: no *.safetensors files and no {INDEX}; the folder holds no weights")
        out: dict[str, str] = {}
        for f in files:
            out.update({k: f.name for k in self._open(f.name).keys()})
        return out

    def _open(self, file: str):
        """The safetensors handle of one shard (cached).

        Raises:
            CheckpointError: the file is not a readable safetensors file (truncated, damaged).
        """
        if file not in self._handles:
            try:
                self._handles[file] = safe_open(str(self.path / file), framework="pt", device="cpu")
            except (SafetensorError, OSError) as err:
                raise CheckpointError(
                    f"{self.path / file}: not a readable safetensors file ({err}); the shard is truncated or damaged: "
                    "rewrite the checkpoint (`metainfer checkpoint ... --force`) or copy it again"
                ) from None
        return self._handles[file]

    def names(self) -> list[str]:
        """Canonical names of every stored text tensor (prefix stripped), plus ``lm_head.weight``."""
        return sorted(self._stored)

    def has(self, name: str) -> bool:
        """True if the canonical ``name`` is stored."""
        return name in self._stored

    def _read(self, stored: str) -> torch.Tensor:
        file = self._file_of[stored]
        try:
            return self._open(file).get_tensor(stored)
        except SafetensorError as err:
            raise CheckpointError(
                f"{self.path / file}: cannot read {stored} ({err}); rewrite the checkpoint (`metainfer checkpoint ... --force`)"
            ) from None

    def get(self, name: str) -> torch.Tensor:
        """One tensor, as stored, by its canonical name (``layers.3.self_attn.q_proj.weight``, ``lm_head.weight``).

        Raises:
            CheckpointError: not in the checkpoint (the message shows the name looked for).
        """
        if name not in self._stored:
            raise CheckpointError(
                f"{self.path}: no tensor {name!r} (looked for {self.prefix + name if not name.startswith('lm_head.') else name}); "
                "run CheckpointReader.validate() for the full list of problems"
            )
        return self._read(self._stored[name])

    def get_linear(self, module: str) -> Bf16Linear | NvFp4Linear:
        """A linear's weight by canonical module name (``layers.0.mlp.shared_expert.gate_proj``).

        bf16 (any float dtype on disk, cast to bf16) → ``Bf16Linear``; NVFP4 → ``NvFp4Linear``
        in the ModelOpt convention (compressed-tensors ``weight_global_scale`` becomes
        ``weight_scale_2 = 1 / weight_global_scale`` here); ModelOpt FP8 (e4m3 weight with a
        per-tensor or per-row fp32 ``weight_scale``, as in the published mixed NVFP4
        checkpoint's attention) → ``Bf16Linear`` of the dequantized weight.

        Raises:
            CheckpointError: no weight for that module.
        """
        if self.has(f"{module}.weight_packed"):
            inp = self.get(f"{module}.input_global_scale") if self.has(f"{module}.input_global_scale") else None
            return NvFp4Linear(
                self.get(f"{module}.weight_packed"), self.get(f"{module}.weight_scale"),
                global_from_compressed_tensors(self.get(f"{module}.weight_global_scale")),
                None if inp is None else global_from_compressed_tensors(inp),
            )
        weight = self.get(f"{module}.weight")
        if weight.dtype == torch.uint8:
            inp = self.get(f"{module}.input_scale").reshape(()) if self.has(f"{module}.input_scale") else None
            return NvFp4Linear(weight, self.get(f"{module}.weight_scale"), self.get(f"{module}.weight_scale_2").float().reshape(()), inp)
        if weight.dtype == torch.float8_e4m3fn:
            return Bf16Linear(self._fp8_dense(module, weight))
        return Bf16Linear(weight.to(torch.bfloat16))

    def _fp8_dense(self, module: str, weight: torch.Tensor) -> torch.Tensor:
        """ModelOpt FP8 (the attention of the published mixed NVFP4 checkpoint): W = e4m3 * weight_scale
        (fp32, per tensor [] or per output row [N, 1]), dequantized to bf16 once at load."""
        if not self.has(f"{module}.weight_scale"):
            raise CheckpointError(f"{self.path}: {module}.weight is float8_e4m3fn but has no weight_scale; the checkpoint is incomplete")
        scale = self.get(f"{module}.weight_scale").float()
        if scale.numel() == 1:
            scale = scale.reshape(())
        elif tuple(scale.shape) in ((weight.shape[0], 1), (weight.shape[0],)):
            scale = scale.reshape(-1, 1)
        else:
            raise CheckpointError(
                f"{self.path}: {module}.weight_scale has shape {list(scale.shape)}; only per-tensor or per-row FP8 scales are supported"
            )
        return (weight.float() * scale).to(torch.bfloat16)

    def get_experts(self, layer: int) -> ExpertWeights:
        """Routed experts of ``layer``: fused bf16 [E, 2I, H] / [E, H, I], or per-expert NVFP4 lists.

        An unfused bf16 checkpoint is stacked into the fused form (gate rows first).

        Raises:
            CheckpointError: a tensor of the layer's experts is missing.
        """
        base = f"layers.{layer}.mlp.experts"
        if self.fused_experts:
            return ExpertWeights(
                gate_up=self.get(f"{base}.gate_up_proj").to(torch.bfloat16), down=self.get(f"{base}.down_proj").to(torch.bfloat16)
            )
        e = self.text_config["num_experts"]
        gate = [self.get_linear(f"{base}.{x}.gate_proj") for x in range(e)]
        up = [self.get_linear(f"{base}.{x}.up_proj") for x in range(e)]
        down = [self.get_linear(f"{base}.{x}.down_proj") for x in range(e)]
        if isinstance(gate[0], NvFp4Linear):
            return ExpertWeights(down=down, gate=gate, up=up)
        gate_up = torch.stack([torch.cat([g.weight, u.weight]) for g, u in zip(gate, up)])
        return ExpertWeights(gate_up=gate_up, down=torch.stack([d.weight for d in down]))

    def validate(self) -> None:
        """Check every text tensor against the layout the config implies.

        Raises:
            CheckpointError: naming every missing, extra and mis-shaped (or NVFP4 mis-typed)
                tensor, with a hint how to fix it.
        """
        from metainfer.checkpoint.validate import check_layout

        check_layout(self)

    def hf_state_dict(self, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
        """Every text weight under ``Qwen3_5MoeForCausalLM`` names, experts fused, NVFP4 dequantized, cast to ``dtype``.

        Keys: ``model.embed_tokens.weight``, ``model.layers.<i>.*`` (experts as
        ``mlp.experts.gate_up_proj`` [E, 2I, H] and ``mlp.experts.down_proj`` [E, H, I]),
        ``model.norm.weight``, ``lm_head.weight``. Loads the whole text model into memory:
        meant for the tiny twin; at full size stream ``iter_hf_tensors`` instead.

        Raises:
            CheckpointError: a tensor is missing.
        """
        return dict(self.iter_hf_tensors(dtype))

    def iter_hf_tensors(self, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None):
        """``(name, tensor)`` pairs of ``hf_state_dict``, one parameter at a time, computed on ``device``
        (CPU by default): a consumer that copies each into a model holds one layer's experts at a time.

        Raises:
            CheckpointError: a tensor is missing.
        """
        from metainfer.checkpoint.layout import model_params

        for p in model_params(self.text_config, mtp=False):
            key = p.name if p.name.startswith("lm_head.") else f"model.{p.name}"
            if p.kind == "experts":
                gate_up, down = self.get_experts(int(p.name.split(".")[1])).fused_dense(dtype, device)
                yield f"{key}.gate_up_proj", gate_up
                yield f"{key}.down_proj", down
            elif p.name.endswith(".weight") and len(p.shape) == 2:
                yield key, self.get_linear(p.name[: -len(".weight")]).dense(dtype, device)
            else:
                yield key, self.get(p.name).to(device=device, dtype=dtype)


def _read_json(path: Path) -> dict:
    """A checkpoint's JSON file as a dict.

    Raises:
        CheckpointError: the file is not valid JSON (names the file, the line and the fix).
    """
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: not valid JSON ({err.msg} at line {err.lineno}); repair it or rewrite the checkpoint") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}; repair it or rewrite the checkpoint")
    return data

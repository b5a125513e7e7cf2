"""Model registry: the real HF configs (kept as data files) and their ``-tiny`` CPU twins.

A model is known by name (``qwen3.6-35b-a3b``) or by path: an HF model folder or its
``config.json`` (``get_model``), whose ``architectures`` / ``model_type`` pick the template
family (``metainfer.checkpoint.facts.FAMILIES``). ``ModelSpec.config`` is the whole HF
``config.json`` (multimodal ``Qwen3_5MoeForConditionalGeneration`` or text-only);
``ModelSpec.text`` is its ``text_config``, the only part the text engine reads, and
``ModelSpec.facts(quant)`` the typed facts a template reads, with their digest.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from metainfer.errors import UnknownNameError

if TYPE_CHECKING:
    from metainfer.checkpoint.facts import ModelFacts
    from metainfer.targets.quant import QuantSpec

DATA = Path(__file__).with_name("data")

#: The tiny twin's text config overrides: same layer pattern (3 GDN then 1 full attention,
#: repeated), GQA with several query heads per kv head, twice as many GDN value heads as
#: key heads, the same partial rotary fraction, 16 experts top-4, a shared expert.
#: Dims are multiples of 16 so the NVFP4 block scale (16 along K) divides them.
TINY_TEXT = {
    "hidden_size": 128,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "vocab_size": 1024,
    "eos_token_id": 1000,
    "bos_token_id": 1000,  # the real 3.6 config has bos == eos; 3.5's null is kept (see _tiny)
    "max_position_embeddings": 4096,
}
#: a model read from a path counts as a CPU-scale twin (``ModelSpec.tiny``) below this many parameters
TINY_PARAMS = 100_000_000
#: The tiny twin's RoPE base: 1e4, not the real 1e7, so that its slowest rotary pair (8 pairs of a 16-dim rotary
#: part: ``theta^(-7/8)`` = 3.2e-4 rad per token) turns by 0.1-0.3 rad within CPU parity prompts (300-960 tokens)
#: and the faster slow pairs by radians: dropping or mis-rotating the slow pairs shows on the CPU (docs/PARITY.md).
TINY_ROPE_THETA = 10_000.0
TINY_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 128}


@dataclass(frozen=True)
class ModelSpec:
    """One model of the registry.

    Attributes:
        name: registry name, e.g. ``qwen3.6-35b-a3b`` or ``qwen3.6-35b-a3b-tiny``.
        family: engine template family under ``templates/engine/`` (``qwen3_5_moe``).
        config: the full HF ``config.json`` as a dict (multimodal wrapper with ``text_config``).
        tiny: True for the small CPU twin.
        source: what resolves to this spec again in another process: the registry name, or the
            absolute path of the model folder / config.json it was read from.
    """

    name: str
    family: str
    config: dict = field(repr=False)
    tiny: bool = False
    source: str = ""

    @property
    def text(self) -> dict:
        """The ``text_config`` dict (hidden size, layer types, MoE and GDN dims); the config itself when text-only."""
        return self.config.get("text_config") or self.config

    def facts(self, quant: "QuantSpec") -> "ModelFacts":
        """The typed facts an engine of this model in weight format ``quant`` is rendered for (with ``.digest``)."""
        from metainfer.checkpoint.facts import model_facts, quantized_by_policy

        return model_facts(self.config, quant.name, quantized_by_policy(quant.is_quantized, quant.name))

    @property
    def layer_types(self) -> list[str]:
        """Per-layer mixer kind, ``linear_attention`` (Gated DeltaNet) or ``full_attention``."""
        return list(self.text["layer_types"])

    def param_count(self) -> dict[str, int]:
        """Parameter counts of the text model: ``total``, and ``active`` per token.

        ``active`` counts the routed top-k experts only and leaves out the embedding
        table (a lookup reads one row), which gives the 2.95 B DESIGN.md quotes.

        Counts every weight the engine reads (embeddings, lm_head, attention, GDN, router,
        experts, shared expert, norms); MTP and vision weights are not counted.
        """
        t = self.text
        h, v = t["hidden_size"], t["vocab_size"]
        hd, nq, nkv = t["head_dim"], t["num_attention_heads"], t["num_key_value_heads"]
        kd = t["linear_key_head_dim"] * t["linear_num_key_heads"]
        vd = t["linear_value_head_dim"] * t["linear_num_value_heads"]
        nv = t["linear_num_value_heads"]
        attn = h * nq * hd * 2 + 2 * h * nkv * hd + nq * hd * h + 2 * hd
        gdn = h * (2 * kd + vd) + h * vd + 2 * h * nv + (2 * kd + vd) * t["linear_conv_kernel_dim"] + vd * h + 2 * nv + t["linear_value_head_dim"]
        e, i, si = t["num_experts"], t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
        expert = 3 * h * i
        shared = 3 * h * si + h
        router = e * h
        total = 2 * v * h + h
        active = v * h + h  # the embedding lookup reads one row, not the table
        for kind in t["layer_types"]:
            mix = attn if kind == "full_attention" else gdn
            total += mix + router + e * expert + shared + 2 * h
            active += mix + router + t["num_experts_per_tok"] * expert + shared + 2 * h
        return {"total": total, "active": active}


def _tiny(config: dict) -> dict:
    cfg = copy.deepcopy(config)
    text = cfg["text_config"]
    bos = text.get("bos_token_id")
    text.update(TINY_TEXT)
    if "rope_parameters" in text:
        text["rope_parameters"] = {**text["rope_parameters"], "rope_theta": TINY_ROPE_THETA}
    else:
        text["rope_theta"] = TINY_ROPE_THETA
    if bos is None:
        text["bos_token_id"] = None
    interval = text.get("full_attention_interval", 4)
    text["layer_types"] = [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(text["num_hidden_layers"])
    ]
    cfg["vision_config"].update(TINY_VISION)
    return cfg


@cache
def _registry() -> dict[str, ModelSpec]:
    specs: dict[str, ModelSpec] = {}
    for path in sorted(DATA.glob("*.json")):
        config = json.loads(path.read_text())
        name = path.stem
        specs[name] = ModelSpec(name, "qwen3_5_moe", config, source=name)
        specs[f"{name}-tiny"] = ModelSpec(f"{name}-tiny", "qwen3_5_moe", _tiny(config), tiny=True, source=f"{name}-tiny")
    return specs


def model_names() -> list[str]:
    """Names of every registered model, real and tiny."""
    return sorted(_registry())


def get_model(name: str) -> ModelSpec:
    """Look a model up by registry name, or read it from an HF model folder or ``config.json`` path.

    A path model is named after its folder (lower case, ``[a-z0-9._-]`` only); when that name is a
    registry name whose facts differ, the facts digest is appended (``qwen3.6-35b-a3b-f1a2b3c4``), so
    a changed config never shares a target, branch or cached checkpoint with the registered model.

    Raises:
        UnknownNameError: neither a registered name nor a readable config path (the message lists
            the known names), or a config no template family serves (the message lists the families).
    """
    path = Path(name).expanduser()
    # a registry name, or a Hugging Face repo id of one (``Qwen/Qwen3.6-35B-A3B``) that is not a local folder
    alias = name.rsplit("/", 1)[-1].lower() if name.count("/") == 1 and not path.exists() else name
    spec = _registry().get(name) or _registry().get(alias)
    if spec is not None:
        return ModelSpec(spec.name, spec.family, copy.deepcopy(spec.config), spec.tiny, spec.source)
    if path.is_dir():
        path = path / "config.json"
    if path.name.endswith(".json") and path.is_file():
        return _from_config_file(path.resolve())
    close = difflib.get_close_matches(alias.lower(), model_names(), n=1, cutoff=0.8)
    raise UnknownNameError(f"unknown model {name!r}: not a registered name and no config.json at that path; "
                           + (f"did you mean {close[0]}? " if close else "")
                           + f"known models: {', '.join(model_names())}; or pass an HF model folder or its config.json")


def _from_config_file(path: Path) -> ModelSpec:
    from metainfer.checkpoint.facts import family_of

    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UnknownNameError(f"cannot read the model config {path}: {err}") from None
    if not isinstance(config, dict):
        raise UnknownNameError(f"{path} is not an HF config (a JSON object)")
    family = family_of(config)
    stem = path.parent.name if path.name == "config.json" else path.stem
    name = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-.") or "model"
    spec = ModelSpec(name, family, config, tiny=False, source=str(path))
    tiny = spec.param_count()["total"] < TINY_PARAMS
    spec = ModelSpec(name, family, config, tiny=tiny, source=str(path))
    clash = _registry().get(name)
    if clash is not None:
        from metainfer.targets.quant import QUANTS

        bf16 = QUANTS["bf16"]
        if clash.facts(bf16).digest != spec.facts(bf16).digest or clash.config != config:
            spec = ModelSpec(f"{name}-f{spec.facts(bf16).digest[:8]}", family, config, tiny, str(path))
    return spec

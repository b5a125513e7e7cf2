"""Model facts: every config field an engine template reads, typed, with a stable digest.

An engine is rendered for one set of facts (``ModelFacts``); a checkpoint has its own (read
from its ``config.json`` and, for the quantization layout, its tensor names). Two sets with
the same digest run on the same rendered engine; any difference is named field by field
(``diff_facts``) and classified by ``metainfer.upgrade`` (none, re-render, re-tune, beyond the
template). The engine imports this module at load time (it may import ``metainfer.checkpoint``),
so it depends on nothing but the standard library.

Template families live in ``FAMILIES``: which HF ``architectures`` / ``model_type`` values a
family's template serves, and which layer kinds, activations, RoPE types and quantized
modules it can express.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterable

from metainfer.errors import UnknownNameError

#: linear modules whose storage format is a fact, as canonical names relative to a layer (``lm_head`` at the top)
MODULE_KINDS = (
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_a", "linear_attn.in_proj_b",
    "linear_attn.out_proj", "mlp.experts", "mlp.shared_expert", "lm_head",
)


@dataclass(frozen=True)
class FamilySpec:
    """One engine template family (``templates/engine/<name>/``) and what it can express.

    Attributes:
        name: folder name under ``templates/engine/``.
        architectures: HF ``architectures`` entries it serves.
        model_types: HF ``model_type`` values (top level or ``text_config``) it serves.
        layer_kinds: ``layer_types`` entries the template has a mixer for.
        activations: ``hidden_act`` values of the expert FFNs it runs.
        rope_types: ``rope_parameters.rope_type`` values it implements.
        quantized: scheme -> module kinds (``MODULE_KINDS``) it runs stored in that scheme;
            ``"*"`` means any linear (FP8 dense is dequantized at load).
    """

    name: str
    architectures: tuple[str, ...]
    model_types: tuple[str, ...]
    layer_kinds: tuple[str, ...]
    activations: tuple[str, ...]
    rope_types: tuple[str, ...]
    quantized: dict[str, tuple[str, ...]]


FAMILIES: dict[str, FamilySpec] = {
    "qwen3_5_moe": FamilySpec(
        name="qwen3_5_moe",
        architectures=("Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"),
        model_types=("qwen3_5_moe", "qwen3_5_moe_text"),
        layer_kinds=("linear_attention", "full_attention"),
        activations=("silu",),
        rope_types=("default",),
        quantized={"nvfp4": ("mlp.experts", "mlp.shared_expert"), "fp8": ("*",)},
    ),
}


def family_of(config: dict) -> str:
    """The template family serving an HF ``config.json`` dict, from ``architectures`` or ``model_type``.

    Raises:
        UnknownNameError: no family serves it; the message names the known families and what they serve.
    """
    archs = set(config.get("architectures") or [])
    types = {config.get("model_type"), (config.get("text_config") or {}).get("model_type")} - {None}
    for fam in FAMILIES.values():
        if archs & set(fam.architectures) or types & set(fam.model_types):
            return fam.name
    known = "; ".join(f"{f.name} (architectures {', '.join(f.architectures)}; model_type {', '.join(f.model_types)})"
                      for f in FAMILIES.values())
    raise UnknownNameError(
        f"no engine template family serves architectures {sorted(archs) or 'none'} / model_type {sorted(types) or 'none'}; "
        f"known families: {known}. A new family needs its own templates/engine/<family>/ and an entry in "
        "metainfer/checkpoint/facts.py FAMILIES"
    )


@dataclass(frozen=True)
class ModelFacts:
    """What an engine of the family is shaped by. Sizes are element counts; ``rope_theta`` is the RoPE base.

    ``quantized`` lists ``(module kind, scheme)`` pairs (``("mlp.experts", "nvfp4")``) for linears not
    stored in bf16; ``quant`` is the weight format name (``bf16`` / ``nvfp4``).
    """

    family: str
    layer_types: tuple[str, ...]
    hidden_size: int
    num_layers: int
    vocab_size: int
    tie_word_embeddings: bool
    rms_norm_eps: float
    norm_convention: str
    hidden_act: str
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    attn_output_gate: bool
    rope_type: str
    rope_theta: float
    partial_rotary_factor: float
    rotary_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    num_experts: int
    num_experts_per_tok: int
    norm_topk_prob: bool
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    mlp_only_layers: tuple[int, ...]
    eos_token_id: Any
    max_position_embeddings: int
    quant: str
    quantized: tuple[tuple[str, str], ...]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (tuples as lists)."""
        return json.loads(json.dumps(asdict(self)))

    @property
    def digest(self) -> str:
        """sha256 (first 16 hex digits) of the canonical JSON of every fact."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ModelFacts":
        """The inverse of ``as_dict`` (lists back to tuples).

        Raises:
            ValueError: a field is missing or unknown (the dict comes from another metainfer version).
        """
        names = {f.name for f in fields(cls)}
        if set(d) != names:
            raise ValueError(f"model facts fields differ: missing {sorted(names - set(d))}, unknown {sorted(set(d) - names)}")
        out = dict(d)
        out["layer_types"] = tuple(d["layer_types"])
        out["mlp_only_layers"] = tuple(d["mlp_only_layers"])
        out["quantized"] = tuple(tuple(x) for x in d["quantized"])
        return cls(**out)


@dataclass(frozen=True)
class FactChange:
    """One differing fact: its name and the old and new values (JSON-able)."""

    field: str
    old: Any
    new: Any


def diff_facts(old: ModelFacts, new: ModelFacts) -> list[FactChange]:
    """Every field whose value differs, in declaration order."""
    a, b = old.as_dict(), new.as_dict()
    return [FactChange(f.name, a[f.name], b[f.name]) for f in fields(ModelFacts) if a[f.name] != b[f.name]]


def text_config_of(config: dict) -> dict:
    """The ``text_config`` of a multimodal config, or the config itself for a text-only one."""
    return config.get("text_config") or config


def model_facts(config: dict, quant: str, quantized: Iterable[tuple[str, str]]) -> ModelFacts:
    """The facts of an HF ``config.json`` dict, given the weight format and which linears are stored quantized.

    Raises:
        UnknownNameError: no template family serves the config (``family_of``).
        KeyError: a field every family config has is missing (the message names it).
    """
    family = family_of(config)
    t = text_config_of(config)
    rope = t.get("rope_parameters") or {}
    head_dim = t["head_dim"]
    partial = float(rope.get("partial_rotary_factor", t.get("partial_rotary_factor", 1.0)))
    tie = config.get("tie_word_embeddings", t.get("tie_word_embeddings", False))
    return ModelFacts(
        family=family,
        layer_types=tuple(t["layer_types"]),
        hidden_size=t["hidden_size"],
        num_layers=t["num_hidden_layers"],
        vocab_size=t["vocab_size"],
        tie_word_embeddings=bool(tie),
        rms_norm_eps=float(t["rms_norm_eps"]),
        norm_convention="zero_centred",  # (1 + w) RMSNorm and a plain-w gated GDN norm: fixed by the model type
        hidden_act=t.get("hidden_act", "silu"),
        num_attention_heads=t["num_attention_heads"],
        num_key_value_heads=t["num_key_value_heads"],
        head_dim=head_dim,
        attn_output_gate=bool(t.get("attn_output_gate", True)),
        rope_type=rope.get("rope_type", "default"),
        rope_theta=float(rope.get("rope_theta", t.get("rope_theta", 10000.0))),
        partial_rotary_factor=partial,
        rotary_dim=int(head_dim * partial),
        linear_num_key_heads=t["linear_num_key_heads"],
        linear_num_value_heads=t["linear_num_value_heads"],
        linear_key_head_dim=t["linear_key_head_dim"],
        linear_value_head_dim=t["linear_value_head_dim"],
        linear_conv_kernel_dim=t["linear_conv_kernel_dim"],
        num_experts=t["num_experts"],
        num_experts_per_tok=t["num_experts_per_tok"],
        norm_topk_prob=bool(t.get("norm_topk_prob", True)),
        moe_intermediate_size=t["moe_intermediate_size"],
        shared_expert_intermediate_size=t["shared_expert_intermediate_size"],
        mlp_only_layers=tuple(t.get("mlp_only_layers") or ()),
        eos_token_id=t.get("eos_token_id"),
        max_position_embeddings=t["max_position_embeddings"],
        quant=quant,
        quantized=tuple(sorted(set(quantized))),
    )


def quantized_by_policy(is_quantized: Callable[[str], bool], scheme: str) -> list[tuple[str, str]]:
    """``(kind, scheme)`` for every ``MODULE_KINDS`` entry a format's policy stores quantized.

    ``is_quantized(module)`` takes a canonical module name (``layers.0.mlp.experts.0.gate_proj``).
    """
    rep = {"mlp.experts": "layers.0.mlp.experts.0.gate_proj", "mlp.shared_expert": "layers.0.mlp.shared_expert.gate_proj",
           "lm_head": "lm_head"}
    return [(k, scheme) for k in MODULE_KINDS if is_quantized(rep.get(k, f"layers.0.{k}"))]


_LAYER = re.compile(r"^layers\.\d+\.(.+)$")


def quantized_by_names(names: Iterable[str]) -> list[tuple[str, str]]:
    """``(kind, scheme)`` pairs from a checkpoint's canonical tensor names: NVFP4 where a module has
    ``weight_scale_2`` (ModelOpt) or ``weight_packed`` (compressed-tensors), FP8 where it has only ``weight_scale``."""
    by_module: dict[str, set[str]] = {}
    for n in names:
        module, _, leaf = n.rpartition(".")
        by_module.setdefault(module, set()).add(leaf)
    out = set()
    for module, leaves in by_module.items():
        if "weight_scale_2" in leaves or "weight_packed" in leaves:
            scheme = "nvfp4"
        elif "weight_scale" in leaves and "weight" in leaves:
            scheme = "fp8"
        else:
            continue
        m = _LAYER.match(module)
        rel = m.group(1) if m else module
        kind = next((k for k in MODULE_KINDS if rel == k or rel.startswith(k + ".")), None)
        if kind is not None:
            out.add((kind, scheme))
    return sorted(out)


def checkpoint_facts(reader: Any) -> ModelFacts:
    """The facts of an opened ``CheckpointReader`` (its config, format and stored tensor names)."""
    return model_facts(reader.config, reader.quant, quantized_by_names(reader.names()))


def facts_mismatch_message(engine_target: str, engine: ModelFacts, checkpoint: ModelFacts, checkpoint_path: str) -> str | None:
    """The refusal an engine gives a checkpoint of other facts (every differing field named, then the
    ``metainfer upgrade`` command), or None when the digests agree."""
    if engine.digest == checkpoint.digest:
        return None
    diffs = "; ".join(f"{c.field}: engine {c.old!r}, checkpoint {c.new!r}" for c in diff_facts(engine, checkpoint))
    return (f"checkpoint {checkpoint_path} does not match the engine rendered for {engine_target} "
            f"(facts {engine.digest} vs {checkpoint.digest}): {diffs}. Upgrade the engine for this checkpoint with "
            f"`metainfer upgrade --target {engine_target} --to {checkpoint_path}` (it re-renders, carries the branch's "
            "accepted iterations and re-gates them), or load the checkpoint this engine was rendered for.")

"""Classify what changed between the model facts an engine was rendered for and a new model's.

Classes, in rising order of work:
- ``none``: no fact differs (a same-architecture weight update, or config fields no template reads);
- ``re-render``: shapes and counts the template takes from the facts (render again, re-gate);
- ``re-tune``: a shape some tunable's best value depends on (the offline agent searches those again);
- ``beyond``: a fact the template cannot express (a new layer kind, activation, RoPE type, quantization
  scheme, a dense-MLP layer, another family): an agent must write template code first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metainfer.checkpoint.facts import FAMILIES, FactChange, ModelFacts, diff_facts

CLASSES = ("none", "re-render", "re-tune", "beyond")

#: fact -> tunables (``engine/tunables.json``) whose best value depends on it
RETUNE: dict[str, tuple[str, ...]] = {
    "hidden_size": ("linear_block_m", "linear_block_n", "linear_block_k", "moe_block_n", "moe_block_k",
                    "moe_gemv_block_n", "moe_gemv_down_block_n"),
    "num_experts": ("moe_block_m", "moe_gemv_num_warps"),
    "num_experts_per_tok": ("moe_block_m", "moe_gemv_unroll"),
    "moe_intermediate_size": ("moe_block_n", "moe_block_k", "moe_gemv_block_n", "moe_gemv_down_block_n"),
    "shared_expert_intermediate_size": ("linear_block_n", "moe_gemv_block_n"),
    "num_attention_heads": ("attention_decode_splits",),
    "num_key_value_heads": ("attention_decode_splits",),
    "head_dim": ("attention_decode_splits",),
    "linear_num_key_heads": ("gdn_chunk_size",),
    "linear_num_value_heads": ("gdn_chunk_size", "gdn_recurrent_prefill_max_tokens"),
    "linear_key_head_dim": ("gdn_chunk_size",),
    "linear_value_head_dim": ("gdn_chunk_size",),
    "vocab_size": ("linear_block_n",),
}


@dataclass(frozen=True)
class ClassifiedChange:
    """One differing fact with its class, the tunables to search again, and (``beyond``) what must be written."""

    field: str
    old: object
    new: object
    cls: str
    tunables: tuple[str, ...] = ()
    needs: str = ""


@dataclass
class FactsDiff:
    """Every classified change and the overall class (the highest of them; ``none`` when nothing changed)."""

    old_digest: str
    new_digest: str
    changes: list[ClassifiedChange] = field(default_factory=list)

    @property
    def cls(self) -> str:
        """The overall class."""
        return max((c.cls for c in self.changes), key=CLASSES.index, default="none")

    @property
    def retune(self) -> list[str]:
        """Tunables to search again, in a stable order."""
        return sorted({t for c in self.changes for t in c.tunables})

    @property
    def beyond(self) -> list[ClassifiedChange]:
        """The changes the template cannot express."""
        return [c for c in self.changes if c.cls == "beyond"]

    def to_json(self) -> dict:
        """Plain dict for the upgrade report and ``run.json``."""
        return {"class": self.cls, "old_digest": self.old_digest, "new_digest": self.new_digest, "retune": self.retune,
                "changes": [c.__dict__ for c in self.changes]}


def _beyond(c: FactChange, new: ModelFacts) -> str:
    """What an agent must write for a change the family cannot express, or '' when it can."""
    fam = FAMILIES.get(new.family)
    if c.field == "family" or fam is None:
        return f"a new engine template family templates/engine/{new.family}/ (this one is {c.old})"
    if c.field == "layer_types":
        unknown = sorted(set(new.layer_types) - set(fam.layer_kinds))
        if unknown:
            return (f"a mixer for layer kind(s) {', '.join(unknown)} in templates/engine/{fam.name}/engine/ (model.py "
                    f"dispatches on layer_types; the template has {', '.join(fam.layer_kinds)}), its weights in weights.py, "
                    f"its state in cache.py, and the kind in FAMILIES['{fam.name}'].layer_kinds")
        return ""
    if c.field == "hidden_act" and new.hidden_act not in fam.activations:
        return f"the {new.hidden_act} expert activation in the MoE kernels (the template runs {', '.join(fam.activations)})"
    if c.field == "rope_type" and new.rope_type not in fam.rope_types:
        return f"RoPE type {new.rope_type} in the rope kernel (the template has {', '.join(fam.rope_types)})"
    if c.field == "quantized":
        bad = [f"{k} as {s}" for k, s in new.quantized if k not in fam.quantized.get(s, ()) and "*" not in fam.quantized.get(s, ())]
        if bad:
            return f"kernels that run {', '.join(bad)} (the template runs quantized: {fam.quantized})"
        return ""
    if c.field == "quant" and new.quant not in ("bf16",) + tuple(fam.quantized):
        return f"weight format {new.quant}"
    if c.field == "mlp_only_layers" and new.mlp_only_layers:
        return f"a dense MLP for layers {list(new.mlp_only_layers)} (the template runs MoE in every layer)"
    if c.field in ("attn_output_gate", "norm_topk_prob", "tie_word_embeddings", "norm_convention"):
        return f"{c.field}={c.new!r} (the template is written for {c.old!r})"
    return ""


def classify(old: ModelFacts, new: ModelFacts) -> FactsDiff:
    """Classify every differing fact of ``old`` -> ``new``."""
    out = FactsDiff(old.digest, new.digest)
    for c in diff_facts(old, new):
        needs = _beyond(c, new)
        if needs:
            out.changes.append(ClassifiedChange(c.field, c.old, c.new, "beyond", needs=needs))
        elif c.field in RETUNE:
            out.changes.append(ClassifiedChange(c.field, c.old, c.new, "re-tune", RETUNE[c.field]))
        else:
            out.changes.append(ClassifiedChange(c.field, c.old, c.new, "re-render"))
    return out

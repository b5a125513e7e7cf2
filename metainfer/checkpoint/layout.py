"""The tensor layout of a real HF checkpoint of Qwen3.5/3.6-35B-A3B (and its tiny twin).

Names and shapes follow the published multimodal checkpoints (``Qwen3_5MoeForConditionalGeneration``):
text weights under ``model.language_model.``, then ``lm_head.weight`` and the MTP head ``mtp.*``
(names from vLLM ``qwen3_5_mtp.py``: ``mtp.fc`` [H, 2H], ``mtp.pre_fc_norm_embedding``,
``mtp.pre_fc_norm_hidden``, ``mtp.layers.<j>.*`` a full-attention + MoE decoder layer, ``mtp.norm``).
Module shapes come from transformers ``modeling_qwen3_5_moe.py``. The vision tower
(``model.visual.*``) is NOT part of this layout: the text engine and ``Qwen3_5MoeForCausalLM``
never read it, and the reader ignores it.

Dtypes: every dense weight is bf16 (the checkpoints' ``dtype: bfloat16``), except that the
Qwen3.5 series stores the GDN ``linear_attn.A_log`` and ``linear_attn.norm.weight`` in fp32
while Qwen3.6 stores them bf16 (vLLM PR #51836, ms-swift PR #9972: Qwen3.5-0.8B holds exactly
those two suffixes in F32; sglang PR #19961). ``expected_tensors`` follows that by model name
(``qwen3.5*``). The reader accepts any float dtype for dense weights and checks dtypes
exactly only for the NVFP4 pieces.

NVFP4 pieces (``metainfer.formats.nvfp4``): routed experts stored unfused, one module per
expert and projection (``mlp.experts.<e>.gate_proj`` ...), as ModelOpt exports them; the
shared expert quantized the same way; everything else bf16. The MTP head stays bf16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from metainfer.formats.nvfp4 import BLOCK
from metainfer.targets.models import ModelSpec
from metainfer.targets.quant import QuantSpec

TEXT_PREFIX = "model.language_model."
TEXT_ONLY_PREFIX = "model."
IGNORED_PREFIXES = ("model.visual.", "mtp.")
CONVENTIONS = ("modelopt", "compressed-tensors")


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one stored tensor."""

    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Param:
    """One dense parameter of the model before storage (fusing, quantization).

    Attributes:
        name: canonical name: text weights without prefix (``layers.0.linear_attn.A_log``),
            ``lm_head.weight``, or ``mtp.*``. Kind ``experts`` names the group
            ``layers.<i>.mlp.experts`` whose members are ``<name>.<e>.{gate,up,down}_proj.weight``.
        shape: dense shape; for ``experts`` (E, I, H).
        kind: the initialiser (``metainfer.checkpoint.init``) and storage rule; ``linear_out``
            marks a projection that writes into the residual stream (scaled init).
        dtype: storage dtype when not quantized.
        num_layers: the text config's ``num_hidden_layers``, for the scaled init of ``linear_out``
            and of the experts' ``down_proj``; 0 where unused.
    """

    name: str
    shape: tuple[int, ...]
    kind: str
    dtype: torch.dtype = torch.bfloat16
    num_layers: int = 0


def _layer_params(pre: str, t: dict, kind: str, gdn_fp32: bool = False) -> Iterator[Param]:
    h, nl = t["hidden_size"], t["num_hidden_layers"]
    yield Param(f"{pre}input_layernorm.weight", (h,), "norm")
    if kind == "linear_attention":
        kd = t["linear_key_head_dim"] * t["linear_num_key_heads"]
        vd = t["linear_value_head_dim"] * t["linear_num_value_heads"]
        nv = t["linear_num_value_heads"]
        a = f"{pre}linear_attn."
        yield Param(f"{a}in_proj_qkv.weight", (2 * kd + vd, h), "linear")
        yield Param(f"{a}in_proj_z.weight", (vd, h), "linear")
        yield Param(f"{a}in_proj_b.weight", (nv, h), "linear")
        yield Param(f"{a}in_proj_a.weight", (nv, h), "linear")
        yield Param(f"{a}conv1d.weight", (2 * kd + vd, 1, t["linear_conv_kernel_dim"]), "conv")
        yield Param(f"{a}dt_bias", (nv,), "dt_bias")
        gdn_dtype = torch.float32 if gdn_fp32 else torch.bfloat16
        yield Param(f"{a}A_log", (nv,), "a_log", gdn_dtype)
        yield Param(f"{a}norm.weight", (t["linear_value_head_dim"],), "gated_norm", gdn_dtype)
        yield Param(f"{a}out_proj.weight", (h, vd), "linear_out", num_layers=nl)
    elif kind == "full_attention":
        hd, nq, nkv = t["head_dim"], t["num_attention_heads"], t["num_key_value_heads"]
        a = f"{pre}self_attn."
        yield Param(f"{a}q_proj.weight", (2 * nq * hd, h), "linear")  # per head [q | gate]
        yield Param(f"{a}k_proj.weight", (nkv * hd, h), "linear")
        yield Param(f"{a}v_proj.weight", (nkv * hd, h), "linear")
        yield Param(f"{a}o_proj.weight", (h, nq * hd), "linear_out", num_layers=nl)
        yield Param(f"{a}q_norm.weight", (hd,), "norm")
        yield Param(f"{a}k_norm.weight", (hd,), "norm")
    else:
        raise ValueError(f"unknown layer type {kind!r}; expected linear_attention or full_attention")
    yield Param(f"{pre}post_attention_layernorm.weight", (h,), "norm")
    e, i, si = t["num_experts"], t["moe_intermediate_size"], t["shared_expert_intermediate_size"]
    yield Param(f"{pre}mlp.gate.weight", (e, h), "router")
    yield Param(f"{pre}mlp.experts", (e, i, h), "experts", num_layers=nl)
    yield Param(f"{pre}mlp.shared_expert.gate_proj.weight", (si, h), "linear")
    yield Param(f"{pre}mlp.shared_expert.up_proj.weight", (si, h), "linear_up")
    yield Param(f"{pre}mlp.shared_expert.down_proj.weight", (h, si), "linear_out", num_layers=nl)
    yield Param(f"{pre}mlp.shared_expert_gate.weight", (1, h), "linear")


def gdn_fp32(model: ModelSpec) -> bool:
    """True for the Qwen3.5 series, whose checkpoints keep GDN ``A_log`` and ``norm.weight`` in fp32."""
    return model.name.startswith("qwen3.5")


def model_params(text: dict, *, mtp: bool = True, gdn_fp32: bool = False) -> list[Param]:
    """Every dense parameter of the text model (+ MTP head), in checkpoint order.

    Args:
        text: the ``text_config`` dict.
        mtp: include the ``mtp.*`` head (``mtp_num_hidden_layers`` layers, 0 if absent).
        gdn_fp32: GDN ``A_log`` and ``norm.weight`` stored fp32 (Qwen3.5 series), else bf16.
    """
    h, v = text["hidden_size"], text["vocab_size"]
    out = [Param("embed_tokens.weight", (v, h), "embed")]
    for i, kind in enumerate(text["layer_types"]):
        out += _layer_params(f"layers.{i}.", text, kind, gdn_fp32)
    out.append(Param("norm.weight", (h,), "norm"))
    out.append(Param("lm_head.weight", (v, h), "linear"))
    n_mtp = text.get("mtp_num_hidden_layers", 0) if mtp else 0
    if n_mtp:
        out.append(Param("mtp.fc.weight", (h, 2 * h), "linear"))
        out.append(Param("mtp.pre_fc_norm_embedding.weight", (h,), "norm"))
        out.append(Param("mtp.pre_fc_norm_hidden.weight", (h,), "norm"))
        for j in range(n_mtp):
            out += _layer_params(f"mtp.layers.{j}.", text, "full_attention")
        out.append(Param("mtp.norm.weight", (h,), "norm"))
    return out


def stored_name(canonical: str, prefix: str = TEXT_PREFIX) -> str:
    """The on-disk name of a canonical name: text weights get ``prefix``; ``lm_head.*`` and ``mtp.*`` stay."""
    return canonical if canonical.startswith(("lm_head.", "mtp.")) else prefix + canonical


def is_quantized_module(quant: QuantSpec, module: str) -> bool:
    """True if the linear ``module`` (canonical, no ``.weight``) is stored NVFP4 under ``quant``; MTP never is."""
    return not module.startswith("mtp.") and quant.is_quantized(module)


def nvfp4_tensors(module: str, n: int, k: int, convention: str = "modelopt") -> dict[str, TensorSpec]:
    """The stored tensors of one NVFP4 linear ``module`` with a dense [n, k] weight.

    modelopt: ``weight`` uint8 [n, k/2], ``weight_scale`` e4m3 [n, k/16], ``weight_scale_2`` fp32 [],
    ``input_scale`` fp32 []. compressed-tensors: ``weight_packed``, ``weight_scale``,
    ``weight_global_scale`` fp32 [1], ``input_global_scale`` fp32 [1].

    Raises:
        ValueError: unknown convention, or k not a multiple of 16.
    """
    if k % BLOCK:
        raise ValueError(f"{module}: K = {k} is not a multiple of {BLOCK}; it cannot be stored NVFP4 (keep it bf16)")
    packed = TensorSpec((n, k // 2), torch.uint8)
    scale = TensorSpec((n, k // BLOCK), torch.float8_e4m3fn)
    if convention == "modelopt":
        scalar = TensorSpec((), torch.float32)
        return {f"{module}.weight": packed, f"{module}.weight_scale": scale,
                f"{module}.weight_scale_2": scalar, f"{module}.input_scale": scalar}
    if convention == "compressed-tensors":
        one = TensorSpec((1,), torch.float32)
        return {f"{module}.weight_packed": packed, f"{module}.weight_scale": scale,
                f"{module}.weight_global_scale": one, f"{module}.input_global_scale": one}
    raise ValueError(f"unknown NVFP4 convention {convention!r}; expected one of {CONVENTIONS}")


def param_tensors(
    p: Param, quant: QuantSpec, *, convention: str = "modelopt", fused_experts: bool | None = None
) -> dict[str, TensorSpec]:
    """The stored tensors (canonical names) of one ``Param`` under ``quant``.

    Experts are stored fused (``gate_up_proj`` [E, 2I, H], gate first; ``down_proj`` [E, H, I])
    when ``fused_experts`` is True, unfused per expert otherwise; None picks the real
    checkpoints' choice: fused for bf16, unfused for NVFP4 (ModelOpt export).

    Raises:
        ValueError: fused NVFP4 experts asked for (no real checkpoint stores them so).
    """
    bf16 = torch.bfloat16
    if p.kind != "experts":
        if p.name.endswith(".weight") and len(p.shape) == 2 and is_quantized_module(quant, p.name[:-7]):
            return nvfp4_tensors(p.name[:-7], *p.shape, convention)
        return {p.name: TensorSpec(p.shape, p.dtype)}
    e, i, h = p.shape
    quantized = is_quantized_module(quant, f"{p.name}.0.gate_proj")
    fused = (not quantized) if fused_experts is None else fused_experts
    if fused:
        if quantized:
            raise ValueError(f"{p.name}: fused NVFP4 experts are not a real checkpoint layout; store them unfused")
        return {f"{p.name}.gate_up_proj": TensorSpec((e, 2 * i, h), bf16), f"{p.name}.down_proj": TensorSpec((e, h, i), bf16)}
    out: dict[str, TensorSpec] = {}
    for x in range(e):
        for proj, (n, k) in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
            module = f"{p.name}.{x}.{proj}"
            out.update(nvfp4_tensors(module, n, k, convention) if quantized else {f"{module}.weight": TensorSpec((n, k), bf16)})
    return out


def expected_tensors(
    model: ModelSpec,
    quant: QuantSpec,
    *,
    convention: str = "modelopt",
    fused_experts: bool | None = None,
    prefix: str = TEXT_PREFIX,
    mtp: bool = True,
) -> dict[str, TensorSpec]:
    """Every tensor a checkpoint of ``model`` in format ``quant`` holds: on-disk name → (shape, dtype).

    Args:
        model: the model (its ``text_config`` gives the dims and layer pattern).
        quant: ``bf16`` or ``nvfp4``.
        convention: NVFP4 tensor naming, ``modelopt`` (default) or ``compressed-tensors``.
        fused_experts: see ``param_tensors``; None = the real checkpoints' choice.
        prefix: text-weight prefix, ``model.language_model.`` (multimodal) or ``model.`` (text-only).
        mtp: include the ``mtp.*`` head.
    """
    out: dict[str, TensorSpec] = {}
    for p in model_params(model.text, mtp=mtp, gdn_fp32=gdn_fp32(model)):
        for name, spec in param_tensors(p, quant, convention=convention, fused_experts=fused_experts).items():
            out[stored_name(name, prefix)] = spec
    return out

"""Load a checkpoint into the engine's own weight layout on the device.

The checkpoint is read through ``metainfer.checkpoint.CheckpointReader`` (docs/CONTRACTS.md,
"Checkpoints"), which hides the on-disk naming (multimodal or text-only prefixes, ModelOpt or
compressed-tensors NVFP4). The layout here is what the ops want:

- dense linears bf16 ``[N, K]``; the projections one layer always runs together are fused
  into one weight: attention ``q|gate, k, v`` -> ``qkv_proj``, Gated DeltaNet
  ``qkv, z, b, a`` -> ``in_proj``, shared expert ``gate, up`` -> ``gate_up`` (bf16 only);
- NVFP4 linears stay packed (``Linear.weight`` uint8 [N, K/2], ``.scale`` e4m3 [N, K/16],
  ``.gscale`` fp32 [] multiplier), dequantized inside the op;
- routed experts stacked per layer (with NVFP4, the shared expert appended as expert E:
  ``MoeWeights.shared_stacked``): bf16 ``w13 [E, 2I, H]`` (gate rows first), ``w2 [E, H, I]``;
  NVFP4 ``w13`` uint8 [E, 2I, H/2], ``s13`` e4m3 [E, 2I, H/16], ``g13`` fp32 [E, 2] (gate and up
  globals differ), ``w2`` uint8 [E, H, I/2], ``s2`` e4m3 [E, H, I/16], ``g2`` fp32 [E].
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from metainfer.checkpoint import CheckpointReader
from metainfer.checkpoint.weights import Bf16Linear, NvFp4Linear

from .ops.moe_pack import PackedExperts
from .target import CONFIG_KEYS, DIMS, ModelDims


@dataclass
class Linear:
    """One linear weight: bf16 ``weight [N, K]`` (``scale``/``gscale`` None), or NVFP4 packed
    ``weight`` uint8 [N, K/2] with ``scale`` e4m3 [N, K/16] and ``gscale`` fp32 [] (multiplier)."""

    weight: torch.Tensor
    scale: torch.Tensor | None = None
    gscale: torch.Tensor | None = None

    @property
    def quantized(self) -> bool:
        """True for an NVFP4 weight."""
        return self.scale is not None

    @property
    def out_features(self) -> int:
        """N."""
        return self.weight.shape[0]


@dataclass
class AttentionWeights:
    """Gated full attention: ``qkv_proj`` [nq*2*hd + 2*nkv*hd, H] (rows: q_proj's per-head
    [q | gate], then k, then v), ``o_proj`` [H, nq*hd], ``q_norm``/``k_norm`` [hd] (zero-centred)."""

    qkv_proj: Linear
    o_proj: Linear
    q_norm: torch.Tensor
    k_norm: torch.Tensor


@dataclass
class GdnWeights:
    """Gated DeltaNet: ``in_proj`` [conv_dim + value_dim + 2*nv, H] (rows: qkv | z | b | a),
    ``conv`` bf16 [conv_dim, W] (depthwise, no bias), ``A_log``/``dt_bias`` fp32 [nv],
    ``norm`` [dv] (plain weight of the gated norm), ``out_proj`` [H, value_dim]."""

    in_proj: Linear
    conv: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor
    norm: torch.Tensor
    out_proj: Linear


@dataclass
class ExpertStack:
    """Routed experts of one layer, stacked (layouts in the module docstring); ``s13``,
    ``g13``, ``s2``, ``g2`` are None for bf16."""

    w13: torch.Tensor | None
    w2: torch.Tensor | None
    s13: torch.Tensor | None = None
    g13: torch.Tensor | None = None
    s2: torch.Tensor | None = None
    g2: torch.Tensor | None = None
    #: NVFP4 experts repacked for ``ops/moe_fused.py`` (tunable ``moe_ops``); w13, s13, w2, s2 are then None
    #: unless ``moe_ops_min_tokens`` > 1 keeps them for small T
    packed: PackedExperts | None = None

    @property
    def quantized(self) -> bool:
        """True for NVFP4 experts."""
        return self.s13 is not None or self.packed is not None


@dataclass
class MoeWeights:
    """Sparse MoE block, in one of two layouts.

    ``shared_stacked`` (NVFP4 experts and shared expert of equal intermediate size): the shared
    expert is expert E of ``experts`` (E+1 stacked) and ``shared_expert_gate``'s row is row E of
    ``router`` (bf16 [E+1, H]), so one router GEMV gives both and the shared expert runs as a
    (k+1)-th routed pair with weight ``sigmoid(gate logit)`` inside the same two MoE kernels.
    Otherwise: ``router`` bf16 [E, H]; ``experts`` E stacked; the shared expert as
    ``shared_gate_up`` (bf16 fused [2I, H]) or ``shared_gate`` + ``shared_up`` (NVFP4, separate
    global scales), ``shared_down`` [H, I]; ``shared_expert_gate`` bf16 [1, H].
    """

    router: torch.Tensor
    experts: ExpertStack
    shared_stacked: bool = False
    shared_down: Linear | None = None
    shared_expert_gate: torch.Tensor | None = None
    shared_gate_up: Linear | None = None
    shared_gate: Linear | None = None
    shared_up: Linear | None = None


@dataclass
class LayerWeights:
    """One decoder layer: ``kind`` ("linear_attention" or "full_attention"), norms bf16 [H]
    (zero-centred), the mixer (``attn`` or ``gdn``, the other None) and the MoE block."""

    kind: str
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    moe: MoeWeights
    attn: AttentionWeights | None = None
    gdn: GdnWeights | None = None


@dataclass
class Weights:
    """The whole text model: ``embed`` bf16 [V, H], ``layers``, final ``norm`` [H], ``lm_head`` bf16 [V, H]."""

    embed: torch.Tensor
    layers: list[LayerWeights]
    norm: torch.Tensor
    lm_head: torch.Tensor


def check_config(text_config: dict, quant: str, dims: ModelDims = DIMS) -> None:
    """Check a checkpoint's ``text_config`` and format against the rendered target.

    Raises:
        ValueError: naming every mismatching dim (checkpoint value vs engine value), or the
            format, and saying to re-render the engine for the checkpoint's model.
    """
    bad = []
    for key, attr in CONFIG_KEYS.items():
        have = text_config.get(key)
        want = getattr(dims, attr)
        if isinstance(want, tuple):
            have = tuple(have) if isinstance(have, list) else have
        if have != want:
            bad.append(f"{key}: checkpoint {have!r}, engine {want!r}")
    if quant != dims.quant:
        bad.append(f"weight format: checkpoint {quant!r}, engine {dims.quant!r}")
    if bad:
        raise ValueError(
            f"checkpoint does not match the engine rendered for {dims.target}: " + "; ".join(bad)
            + ". Re-render the engine for this checkpoint's model and format "
            "(`metainfer render --model M --quant Q --gpu G --force`, or `metainfer upgrade --target "
            f"{dims.target} --to <checkpoint>` to carry the branch's accepted iterations) or load the matching checkpoint."
        )


#: what ``metainfer render`` recorded this engine was rendered for (model facts, digest, config)
RENDERED_FOR = Path(__file__).with_name("rendered_for.json")


def check_facts(reader: CheckpointReader, record: Path = RENDERED_FOR) -> None:
    """Refuse a checkpoint whose model facts (every config field the template reads, the weight format and
    which linears are quantized) differ from those this engine was rendered for; no record, no check.

    Raises:
        ValueError: naming every differing fact and the ``metainfer upgrade`` command.
    """
    from metainfer.checkpoint.facts import ModelFacts, checkpoint_facts, facts_mismatch_message

    if not record.is_file():
        return
    rendered = json.loads(record.read_text())
    try:
        mine = ModelFacts.from_dict(rendered["facts"])
    except (KeyError, ValueError) as err:
        raise ValueError(f"{record} is from another metainfer version ({err}); re-render the engine") from None
    msg = facts_mismatch_message(rendered["target"], mine, checkpoint_facts(reader), str(reader.path))
    if msg:
        raise ValueError(msg)


def _linear(reader: CheckpointReader, module: str, device: torch.device) -> Linear:
    return _to_linear(reader.get_linear(module), module, device)


def _to_linear(lin: Bf16Linear | NvFp4Linear, module: str, device: torch.device) -> Linear:
    if isinstance(lin, NvFp4Linear):
        return Linear(lin.weight.to(device), lin.weight_scale.to(device), lin.weight_scale_2.float().reshape(()).to(device))
    if isinstance(lin, Bf16Linear):
        return Linear(lin.weight.to(device=device, dtype=torch.bfloat16))
    raise ValueError(f"{module}: unsupported weight type {type(lin).__name__}; this engine reads bf16 and NVFP4 linears")


def _fused_bf16(reader: CheckpointReader, modules: list[str], device: torch.device) -> Linear:
    parts = [_linear(reader, m, device) for m in modules]
    for m, p in zip(modules, parts):
        if p.quantized:
            raise ValueError(
                f"{m} is stored NVFP4, but this engine keeps attention and Gated DeltaNet projections in bf16; "
                "use a checkpoint with NVFP4 experts only (the nvfp4 format), or teach weights.py to keep it packed"
            )
    return Linear(torch.cat([p.weight for p in parts]))


def _experts(reader: CheckpointReader, layer: int, device: torch.device, extra: tuple | None = None) -> ExpertStack:
    """The layer's routed experts stacked; ``extra`` = NVFP4 ``(gate, up, down)`` appended as expert E
    (ignored when the experts are bf16)."""
    ex = reader.get_experts(layer)
    if not ex.quantized:
        return ExpertStack(ex.gate_up.to(device=device, dtype=torch.bfloat16), ex.down.to(device=device, dtype=torch.bfloat16))
    gates, ups, downs = list(ex.gate), list(ex.up), list(ex.down)
    if extra is not None:
        gates.append(extra[0]), ups.append(extra[1]), downs.append(extra[2])
    w13 = torch.stack([torch.cat([g.weight, u.weight]) for g, u in zip(gates, ups)])  # [E, 2I, H/2]
    s13 = torch.stack([torch.cat([g.weight_scale, u.weight_scale]) for g, u in zip(gates, ups)])  # [E, 2I, H/16]
    g13 = torch.stack([torch.stack([g.weight_scale_2.reshape(()), u.weight_scale_2.reshape(())]) for g, u in zip(gates, ups)])
    w2 = torch.stack([d.weight for d in downs])  # [E, H, I/2]
    s2 = torch.stack([d.weight_scale for d in downs])  # [E, H, I/16]
    g2 = torch.stack([d.weight_scale_2.reshape(()) for d in downs])  # [E]
    return ExpertStack(
        w13.to(device), w2.to(device), s13.to(device), g13.float().to(device), s2.to(device), g2.float().to(device)
    )


def _moe(reader: CheckpointReader, i: int, device: torch.device) -> MoeWeights:
    pre = f"layers.{i}.mlp."
    bf16 = dict(device=device, dtype=torch.bfloat16)
    router = reader.get(f"{pre}gate.weight").to(**bf16)
    shared_gate = reader.get(f"{pre}shared_expert_gate.weight").to(**bf16)
    names = [f"{pre}shared_expert.{p}_proj" for p in ("gate", "up", "down")]
    raw = [reader.get_linear(n) for n in names]
    stackable = all(isinstance(r, NvFp4Linear) for r in raw) and raw[0].weight.shape[0] == reader.text_config.get("moe_intermediate_size")
    experts = _experts(reader, i, device, extra=tuple(raw) if stackable else None)  # bf16 experts ignore extra
    if stackable and experts.quantized:
        return MoeWeights(router=torch.cat([router, shared_gate]), experts=experts, shared_stacked=True)
    gate, up, down = (_to_linear(r, n, device) for r, n in zip(raw, names))
    moe = MoeWeights(router=router, experts=experts, shared_down=down, shared_expert_gate=shared_gate)
    if gate.quantized or up.quantized:
        moe.shared_gate, moe.shared_up = gate, up
    else:
        moe.shared_gate_up = Linear(torch.cat([gate.weight, up.weight]))
    return moe


def load_weights(reader: CheckpointReader, device: torch.device, dims: ModelDims = DIMS) -> Weights:
    """Read every text weight the engine uses and place it on ``device`` in the engine layout.

    Raises:
        ValueError: the checkpoint's config or format does not match ``dims`` (``check_config``),
            or a weight has a type this engine does not run.
        metainfer.errors.CheckpointError: tensors missing, extra or mis-shaped (``reader.validate``).
    """
    check_config(reader.text_config, reader.quant, dims)
    check_facts(reader)
    reader.validate()  # every missing or mis-shaped tensor named at once, before any copy
    bf16 = dict(device=device, dtype=torch.bfloat16)
    layers = []
    for i, kind in enumerate(dims.layer_types):
        pre = f"layers.{i}."
        layer = LayerWeights(
            kind=kind,
            input_norm=reader.get(f"{pre}input_layernorm.weight").to(**bf16),
            post_norm=reader.get(f"{pre}post_attention_layernorm.weight").to(**bf16),
            moe=_moe(reader, i, device),
        )
        if kind == "full_attention":
            a = f"{pre}self_attn."
            layer.attn = AttentionWeights(
                qkv_proj=_fused_bf16(reader, [f"{a}q_proj", f"{a}k_proj", f"{a}v_proj"], device),
                o_proj=_linear(reader, f"{a}o_proj", device),
                q_norm=reader.get(f"{a}q_norm.weight").to(**bf16),
                k_norm=reader.get(f"{a}k_norm.weight").to(**bf16),
            )
        else:
            a = f"{pre}linear_attn."
            layer.gdn = GdnWeights(
                in_proj=_fused_bf16(reader, [f"{a}in_proj_qkv", f"{a}in_proj_z", f"{a}in_proj_b", f"{a}in_proj_a"], device),
                conv=reader.get(f"{a}conv1d.weight").reshape(dims.conv_dim, dims.linear_conv_kernel_dim).to(**bf16),
                A_log=reader.get(f"{a}A_log").to(device=device, dtype=torch.float32),
                dt_bias=reader.get(f"{a}dt_bias").to(device=device, dtype=torch.float32),
                norm=reader.get(f"{a}norm.weight").to(**bf16),
                out_proj=_linear(reader, f"{a}out_proj", device),
            )
        layers.append(layer)
    return Weights(
        embed=reader.get("embed_tokens.weight").to(**bf16),
        layers=layers,
        norm=reader.get("norm.weight").to(**bf16),
        lm_head=reader.get("lm_head.weight").to(**bf16),
    )

"""Seeded random initialisation of the synthetic checkpoint's weights (init version ``INIT_VERSION``).

Each tensor is drawn from its own ``torch.Generator`` seeded from ``(seed, canonical name)``,
so a weight does not depend on the order it is generated in, and the bf16 and NVFP4
checkpoints of one seed hold the same dense weights (NVFP4 = quantize(bf16)).

The weights are chosen so that the parity gate can see every op (docs/PARITY.md, "The
synthetic checkpoint"): each norm, gate and scale is far from identity and distinct per
layer and channel, so skipping, swapping or flattening one moves the logits by much more
than bf16 rounding does, while the network stays numerically healthy (HF in bf16 within a
few per cent of HF in fp32).

- Linears ``N(0, 1/fan_in)``; up projections 2x that. Residual output projections (kind
  ``linear_out``: attention ``o_proj``, GDN ``out_proj``, experts' and shared expert's
  ``down_proj``) times ``1/sqrt(2 L)``, L = ``num_hidden_layers`` (GPT-2 / Megatron-LM scaled
  init), so rounding is not amplified layer over layer.
- Zero-centred RMSNorm weights (HF computes ``x̂ · (1 + w)``): ``1 + w`` log-normal per
  channel (sigma ``NORM_SIGMA``) around a per-tensor level ``exp(N(0, NORM_LEVEL_SIGMA²))``;
  attention ``q_norm`` / ``k_norm`` around ``QK_NORM_LEVEL`` (sharp attention: scores of std
  about 4, so RoPE, the scale and every q/k channel matter). The GDN output norm (plain ``w``)
  log-normal the same way.
- Gates with a wide logit spread (a constant gate is far off): the attention gate half of
  ``q_proj`` (the q half is normalised, so scaling the whole projection changes only the
  gate), the shared-expert gate and GDN ``in_proj_b`` (beta) are drawn ``GATE_STD_FACTOR``
  times wider; GDN ``in_proj_a`` ``A_STD_FACTOR`` times narrower.
- GDN decay ``g = -exp(A_log) · softplus(a + dt_bias)``, two kinds of value head, alternating:
  - even heads (long memory): ``A_log = log U(1, 16)``, ``dt_bias = softplus⁻¹(dt)`` with ``dt`` log-uniform in
    [``DT_MIN``, ``DT_MAX``], so these heads span fast to very slow decay (|g| down to about 1e-4, where a state
    rounded to bf16 loses the decay). There ``a + dt_bias`` is far below 0, where softplus(x) ≈ exp(x) within 5 %;
  - odd heads (softplus's bend): ``dt_bias`` U(``BEND_DT_BIAS``), so ``a + dt_bias`` spans both sides of 0, where
    softplus and exp differ by up to 2x, and ``A = exp(A_log)`` U(``BEND_A``), so the decay per token
    (``exp(g)``, about 0.5-0.98 at a = 0) keeps several tokens of memory and a wrong ``g`` shows in the output.
- MLP weights (routed and shared experts: the NVFP4-quantized ones) carry a log-normal factor
  per (row, 16-element block) with unit mean square (sigma ``BLOCK_SIGMA``): NVFP4 block scales
  then differ block to block, so a block-scale indexing error shows.
- Embeddings ``N(0, 1)``; conv1d ``N(0, 1/4)``; router rows ``N(0, 1/H)`` times a per-expert
  log-normal scale (sigma 0.7), so routing is skewed.
"""

from __future__ import annotations

import hashlib
import math

import torch

#: Bumped whenever a checkpoint of the same (model, quant, seed) would hold different values;
#: written to the checkpoint's ``metainfer.json`` and part of the build cache key. 1: scaled
#: residual init; 2: sharpened norms, gates, decays and NVFP4 blocks, gate/up share a global scale; 3: the same
#: weights, written with the tiny twin's RoPE theta 1e4 (``metainfer.targets.models.TINY_ROPE_THETA``): caches keyed by
#: (model, quant, seed, init version) alone must not hand out a checkpoint of the old config; 4: odd GDN heads decay
#: in softplus's bend (a decay computed with exp instead of softplus passed on version 3).
INIT_VERSION = 4

UP_STD_FACTOR = 2.0
ROUTER_SKEW_SIGMA = 0.7
NORM_SIGMA = 0.5
NORM_LEVEL_SIGMA = 0.25
QK_NORM_LEVEL = 1.6
GATE_STD_FACTOR = 3.0
A_STD_FACTOR = 0.5
DT_MIN, DT_MAX = 1e-4, 1e-1
BEND_DT_BIAS = (-1.0, 1.0)
BEND_A = (0.05, 0.5)
BLOCK_SIGMA = 0.7
BLOCK = 16

_WIDE_GATES = ("self_attn.q_proj.weight", "mlp.shared_expert_gate.weight", "linear_attn.in_proj_b.weight")


def residual_out_scale(num_layers: int) -> float:
    """``1/sqrt(2 L)``: the std factor of a residual output projection in an ``L``-layer model
    (two residual branches per layer; GPT-2 / Megatron-LM scaled init).

    Raises:
        ValueError: ``num_layers`` is not a positive integer.
    """
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"residual output init needs num_hidden_layers >= 1, got {num_layers!r}")
    return 1.0 / math.sqrt(2 * num_layers)


def generator(seed: int, name: str) -> torch.Generator:
    """A CPU generator seeded from ``seed`` and the tensor's canonical ``name`` (sha256, 63 bits)."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def _log_normal(shape: tuple[int, ...], g: torch.Generator, level: float) -> torch.Tensor:
    """``level · exp(N(0, NORM_LEVEL_SIGMA²)) · exp(N(0, NORM_SIGMA²))`` per element: one level per tensor."""
    mu = math.log(level) + float(torch.randn((), generator=g)) * NORM_LEVEL_SIGMA
    return torch.exp(mu + torch.randn(shape, generator=g) * NORM_SIGMA)


def block_factor(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """Log-normal factor [N, K] constant over 16-element K blocks, ``E[f²] = 1`` (sigma ``BLOCK_SIGMA``);
    all ones when K is not a multiple of 16."""
    n, k = shape[-2], shape[-1]
    if k % BLOCK:
        return torch.ones(shape)
    z = torch.randn(*shape[:-1], k // BLOCK, generator=g) * BLOCK_SIGMA - BLOCK_SIGMA**2
    return torch.exp(z).repeat_interleave(BLOCK, dim=-1)


def _dt_bias(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """[HV]: even heads ``softplus⁻¹(dt)``, dt log-uniform in [DT_MIN, DT_MAX] (``log(expm1(dt))``); odd heads
    U(BEND_DT_BIAS)."""
    dt = torch.exp(torch.empty(shape).uniform_(math.log(DT_MIN), math.log(DT_MAX), generator=g))
    bend = torch.empty(shape).uniform_(*BEND_DT_BIAS, generator=g)
    return torch.where(_odd_heads(shape), bend, torch.log(torch.expm1(dt)))


def _a_log(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    """[HV]: even heads ``log U(1, 16)``, odd heads ``log U(BEND_A)``."""
    slow = torch.empty(shape).uniform_(1.0, 16.0, generator=g)
    bend = torch.empty(shape).uniform_(*BEND_A, generator=g)
    return torch.where(_odd_heads(shape), bend, slow).log()


def _odd_heads(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.arange(shape[-1]) % 2 == 1


def init_dense(name: str, shape: tuple[int, ...], kind: str, seed: int, num_layers: int | None = None) -> torch.Tensor:
    """Draw one dense float32 parameter.

    Args:
        name: canonical name (seeds the generator; a few names get wider or narrower draws,
            see the module docstring).
        shape: its shape; for linears [N, K] with fan-in K.
        kind: ``linear``, ``linear_up``, ``linear_out``, ``embed``, ``norm``, ``gated_norm``,
            ``a_log``, ``dt_bias``, ``conv``, ``router`` (see the module docstring).
        seed: checkpoint seed.
        num_layers: the text config's ``num_hidden_layers``; required for ``linear_out``
            (std ``1/sqrt(K) * 1/sqrt(2 L)``), ignored otherwise.
    Raises:
        ValueError: unknown kind, or ``linear_out`` without a positive ``num_layers``.
    """
    g = generator(seed, name)
    if kind in ("linear", "linear_up", "linear_out", "router"):
        std = (UP_STD_FACTOR if kind == "linear_up" else 1.0) / math.sqrt(shape[-1])
        if kind == "linear_out":
            std *= residual_out_scale(num_layers)
        if name.endswith(_WIDE_GATES):
            std *= GATE_STD_FACTOR
        elif name.endswith("linear_attn.in_proj_a.weight"):
            std *= A_STD_FACTOR
        w = torch.randn(shape, generator=g) * std
        if kind == "router":  # per-expert row scale, log-normal: skewed routing
            w *= torch.exp(torch.randn(shape[0], 1, generator=g) * ROUTER_SKEW_SIGMA)
        elif ".mlp.shared_expert." in name and len(shape) == 2:
            w *= block_factor(shape, g)
        return w
    if kind == "embed":
        return torch.randn(shape, generator=g)
    if kind == "norm":
        level = QK_NORM_LEVEL if name.endswith(("q_norm.weight", "k_norm.weight")) else 1.0
        return _log_normal(shape, g, level) - 1.0
    if kind == "gated_norm":
        return _log_normal(shape, g, 1.0)
    if kind == "dt_bias":
        return _dt_bias(shape, g)
    if kind == "a_log":
        return _a_log(shape, g)
    if kind == "conv":
        return torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    raise ValueError(f"unknown init kind {kind!r} for {name}")


def init_expert(group: str, expert: int, proj: str, shape: tuple[int, int], seed: int, num_layers: int) -> torch.Tensor:
    """One routed expert's dense float32 weight ``<group>.<expert>.<proj>.weight`` [N, K].

    gate ``N(0, 1/K)``, up 2x wider, down (writes into the residual stream) ``N(0, 1/K)`` times
    ``1/sqrt(2 num_layers)``; each times a per-16-block log-normal factor (``block_factor``).

    Raises:
        ValueError: ``num_layers`` is not a positive integer (down_proj only).
    """
    name = f"{group}.{expert}.{proj}.weight"
    kind = {"up_proj": "linear_up", "down_proj": "linear_out"}.get(proj, "linear")
    w = init_dense(name, shape, kind, seed, num_layers)
    return w * block_factor(shape, generator(seed, name + ":blocks"))

"""Seeded random initialisation of the synthetic checkpoint's weights.

Each tensor is drawn from its own ``torch.Generator`` seeded from ``(seed, canonical name)``,
so a weight does not depend on the order it is generated in, and the bf16 and NVFP4
checkpoints of one seed hold the same dense weights (NVFP4 = quantize(bf16)).

Scales are chosen so the tiny twin computes something with real margins, not noise
around zero: linears ``N(0, 1/fan_in)`` (at hidden 2048 this is the model's
``initializer_range`` 0.02), up projections 2x that (so gate and up of one expert get
visibly different NVFP4 global scales), embeddings ``N(0, 1)``, zero-centred RMSNorm
weights ``N(0, 0.1²)`` (HF computes ``x̂ * (1 + w)``), the GDN output norm ``1 + N(0, 0.1²)``
(plain ``w``), ``A_log = log U(1, 16)`` (HF draws U(0.01, 16)), ``dt_bias = 1 + N(0, 0.1²)``,
conv1d ``N(0, 1/4)`` (kernel 4), router rows ``N(0, 1/H)`` times a per-expert log-normal
scale (sigma 0.7) so routing is skewed.

Residual output projections (kind ``linear_out``: attention ``o_proj``, GDN ``out_proj``, the
routed experts' and the shared expert's ``down_proj``) are drawn ``N(0, 1/fan_in)`` times
``1/sqrt(2 L)``, L = ``num_hidden_layers`` of the text config: the "scaled init" of GPT-2
(Radford et al. 2019, section 2.3) and Megatron-LM for the layers that write into the residual
stream. Why: with unscaled O(1) updates from every branch the random network amplifies
rounding error layer over layer (about +2 % relative per layer on the tiny twin: HF in bf16
landed 0.21 / 0.34 relative L2 from HF in fp32 on prefill / decode logits), so a bf16-vs-fp32
parity tolerance set from that gap only caught gross bugs. Real trained models are far less
sensitive than an unscaled random net; with the scaled init the tiny twin's bf16 gap falls to
about 2 % (docs/PARITY.md, "The anchor") and the logits keep std about 1 and real top-2
margins. At full size (40 layers) it also keeps the bf16-vs-bf16 comparison meaningful.
"""

from __future__ import annotations

import hashlib
import math

import torch

UP_STD_FACTOR = 2.0
ROUTER_SKEW_SIGMA = 0.7


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


def init_dense(name: str, shape: tuple[int, ...], kind: str, seed: int, num_layers: int | None = None) -> torch.Tensor:
    """Draw one dense float32 parameter.

    Args:
        name: canonical name (seeds the generator).
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
        w = torch.randn(shape, generator=g) * std
        if kind == "router":  # per-expert row scale, log-normal: skewed routing
            w *= torch.exp(torch.randn(shape[0], 1, generator=g) * ROUTER_SKEW_SIGMA)
        return w
    if kind == "embed":
        return torch.randn(shape, generator=g)
    if kind == "norm":
        return torch.randn(shape, generator=g) * 0.1
    if kind in ("gated_norm", "dt_bias"):
        return 1.0 + torch.randn(shape, generator=g) * 0.1
    if kind == "a_log":
        return torch.empty(shape).uniform_(1.0, 16.0, generator=g).log_()
    if kind == "conv":
        return torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    raise ValueError(f"unknown init kind {kind!r} for {name}")


def init_expert(group: str, expert: int, proj: str, shape: tuple[int, int], seed: int, num_layers: int) -> torch.Tensor:
    """One routed expert's dense float32 weight ``<group>.<expert>.<proj>.weight`` [N, K].

    gate ``N(0, 1/K)``, up 2x wider, down (writes into the residual stream) ``N(0, 1/K)`` times
    ``1/sqrt(2 num_layers)``.

    Raises:
        ValueError: ``num_layers`` is not a positive integer (down_proj only).
    """
    kind = {"up_proj": "linear_up", "down_proj": "linear_out"}.get(proj, "linear")
    return init_dense(f"{group}.{expert}.{proj}.weight", shape, kind, seed, num_layers)

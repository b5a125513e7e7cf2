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
"""

from __future__ import annotations

import hashlib
import math

import torch

UP_STD_FACTOR = 2.0
ROUTER_SKEW_SIGMA = 0.7


def generator(seed: int, name: str) -> torch.Generator:
    """A CPU generator seeded from ``seed`` and the tensor's canonical ``name`` (sha256, 63 bits)."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def init_dense(name: str, shape: tuple[int, ...], kind: str, seed: int) -> torch.Tensor:
    """Draw one dense float32 parameter.

    Args:
        name: canonical name (seeds the generator).
        shape: its shape; for linears [N, K] with fan-in K.
        kind: ``linear``, ``linear_up``, ``embed``, ``norm``, ``gated_norm``, ``a_log``,
            ``dt_bias``, ``conv``, ``router`` (see the module docstring).
    Raises:
        ValueError: unknown kind.
    """
    g = generator(seed, name)
    if kind in ("linear", "linear_up", "router"):
        std = (UP_STD_FACTOR if kind == "linear_up" else 1.0) / math.sqrt(shape[-1])
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


def init_expert(group: str, expert: int, proj: str, shape: tuple[int, int], seed: int) -> torch.Tensor:
    """One routed expert's dense float32 weight ``<group>.<expert>.<proj>.weight`` (gate/down N(0, 1/K), up 2x wider)."""
    return init_dense(f"{group}.{expert}.{proj}.weight", shape, "linear_up" if proj == "up_proj" else "linear", seed)

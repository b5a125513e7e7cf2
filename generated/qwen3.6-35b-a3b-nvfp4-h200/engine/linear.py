"""``y = x @ W.T`` for either weight kind the engine holds (bf16 or packed NVFP4)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import kernels
from .weights import Linear


def linear(x: torch.Tensor, lin: Linear, **launch) -> torch.Tensor:
    """Apply one linear weight.

    Args:
        x: bf16 [M, K].
        lin: bf16 ``[N, K]`` weight (``torch.nn.functional.linear``), or NVFP4 packed
            (``kernels.nvfp4_linear``, which gets ``launch``: block sizes from tunables).
    Returns:
        bf16 [M, N].
    """
    if lin.quantized:
        return kernels.nvfp4_linear(x, lin.weight, lin.scale, lin.gscale, **launch)
    return F.linear(x, lin.weight)

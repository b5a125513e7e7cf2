"""What the reader hands the engine: one linear's weight (bf16 or NVFP4) and one layer's experts."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from metainfer.formats.nvfp4 import dequantize


@dataclass(frozen=True)
class Bf16Linear:
    """A dense linear weight: ``weight`` bf16 [N, K] (y = x @ weight.T)."""

    weight: torch.Tensor

    @property
    def shape(self) -> tuple[int, int]:
        """Dense (N, K)."""
        return tuple(self.weight.shape)

    def dense(self, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
        """The weight as a dense [N, K] tensor of ``dtype`` (on ``device``, default where it is)."""
        return self.weight.to(device=device, dtype=dtype)


@dataclass(frozen=True)
class NvFp4Linear:
    """An NVFP4 linear weight in the ModelOpt convention (``metainfer.formats.nvfp4``).

    Attributes:
        weight: uint8 [N, K/2], two E2M1 codes per byte (2j low nibble, 2j+1 high).
        weight_scale: float8_e4m3fn [N, K/16].
        weight_scale_2: float32 [], the global *multiplier*: W = e2m1 * weight_scale * weight_scale_2.
        input_scale: float32 [] activation scale (W4A4 only), or None if the checkpoint has none.
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor
    weight_scale_2: torch.Tensor
    input_scale: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """Dense (N, K)."""
        return (self.weight.shape[0], self.weight.shape[1] * 2)

    def dense(self, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> torch.Tensor:
        """Dequantized dense [N, K] weight of ``dtype`` (computed in fp32 on ``device``, default where it is)."""
        w, s, s2 = (t.to(device) for t in (self.weight, self.weight_scale, self.weight_scale_2))
        return dequantize(w, s, s2, dtype)


@dataclass(frozen=True)
class ExpertWeights:
    """One layer's routed experts.

    bf16 checkpoints: ``gate_up`` bf16 [E, 2I, H] (gate rows first) and ``down`` bf16 [E, H, I],
    fused as transformers stores them (an unfused bf16 checkpoint is stacked into this form);
    ``gate`` and ``up`` are None.
    NVFP4 checkpoints: ``gate``, ``up`` and ``down`` are lists of length E of ``NvFp4Linear``
    (gate/up dense [I, H], down dense [H, I]), each with its own global scale (gate and up of
    one expert may differ); ``gate_up`` is None.
    """

    gate_up: torch.Tensor | None = None
    down: torch.Tensor | list[NvFp4Linear] | None = None
    gate: list[NvFp4Linear] | None = None
    up: list[NvFp4Linear] | None = None

    @property
    def quantized(self) -> bool:
        """True for per-expert NVFP4 lists."""
        return self.gate is not None

    def fused_dense(self, dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Dense fused (gate_up [E, 2I, H], down [E, H, I]) of ``dtype``, dequantizing NVFP4 experts
        (on ``device``, default where the tensors are: dequantizing a full-size layer is fast on a GPU)."""
        if not self.quantized:
            return self.gate_up.to(device=device, dtype=dtype), self.down.to(device=device, dtype=dtype)
        gate, up, down = (_dense_stack(x, dtype, device) for x in (self.gate, self.up, self.down))
        return torch.cat([gate, up], dim=1), down


def _dense_stack(linears: list[NvFp4Linear], dtype: torch.dtype, device: torch.device | str | None = None) -> torch.Tensor:
    """Dequantize E same-shaped NVFP4 linears at once: [E, N, K], each with its own global scale."""
    return dequantize(
        torch.stack([x.weight for x in linears]).to(device), torch.stack([x.weight_scale for x in linears]).to(device),
        torch.stack([x.weight_scale_2.reshape(()) for x in linears]).to(device), dtype,
    )

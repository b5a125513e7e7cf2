"""NVFP4: E2M1 4-bit codes, float8_e4m3 block scales per 16 K-elements, one fp32 global scale.

Layout (DESIGN.md "NVFP4 (facts)"; NVIDIA TensorRT-Model-Optimizer ``NVFP4QTensor``):

- An E2M1 code is a uint8 in 0..15: bit 3 the sign, bits 0..2 index the magnitudes
  ``{0, .5, 1, 1.5, 2, 3, 4, 6}``. Two codes share a byte along K: element ``2j`` in the
  low nibble, element ``2j+1`` in the high nibble (ModelOpt ``NVFP4QTensor.quantize`` and
  compressed-tensors ``pack_fp4_to_uint8`` agree on this order).
- ModelOpt: ``weight`` uint8 [N, K/2], ``weight_scale`` float8_e4m3fn [N, K/16],
  ``weight_scale_2`` fp32 [] = amax / (6 * 448), a *multiplier*:
  ``W = e2m1 * weight_scale * weight_scale_2``.
- compressed-tensors (``nvfp4-pack-quantized``): ``weight_packed`` (same bytes),
  ``weight_scale`` (same), ``weight_global_scale`` fp32 [1] = 6 * 448 / amax, a *divisor*:
  ``W = e2m1 * weight_scale / weight_global_scale``.

6 is the largest E2M1 magnitude, 448 the largest finite float8_e4m3fn value.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0

#: magnitude of code ``c & 7``; code ``c | 8`` is its negative.
E2M1_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
#: all 16 codes' values (sign bit 3) and, per byte, its (low, high) element pair: [256, 2].
_CODE_VALUES = torch.cat([E2M1_VALUES, -E2M1_VALUES])
_BYTE_VALUES = torch.stack([_CODE_VALUES.repeat(16), _CODE_VALUES.repeat_interleave(16)], dim=-1)


@dataclass(frozen=True)
class NvFp4:
    """One NVFP4 weight in the ModelOpt convention.

    Attributes:
        weight: uint8 [N, K/2], two E2M1 codes per byte (2j low nibble, 2j+1 high).
        weight_scale: float8_e4m3fn [N, K/16], one block scale per 16 K-elements.
        weight_scale_2: float32 [], the global multiplier (amax / (6*448)).
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor
    weight_scale_2: torch.Tensor


def _check_k(k: int, what: str) -> None:
    if k % BLOCK:
        raise ValueError(
            f"{what}: K = {k} is not a multiple of {BLOCK}; NVFP4 has one block scale per {BLOCK} K-elements, "
            f"so pad K to {((k + BLOCK - 1) // BLOCK) * BLOCK} or keep this weight in bf16"
        )


def encode_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Round each value to the nearest E2M1 code (ties to the even code, as ModelOpt ``_cast_fp4`` does).

    The magnitudes are evenly spaced within three ranges, so the code is a round-half-even
    (``torch.round``) in each: |x| < 2 step 0.5 (code ``round(2|x|)``), 2 <= |x| < 4 step 1
    (code ``2 + round(|x|)``), |x| >= 4 step 2 (code ``4 + round(|x|/2)``, saturating at 7 = 6.0).
    At every midpoint this picks the even code, e.g. 0.25 -> 0, 0.75 -> 1.0, 2.5 -> 2, 5 -> 4.

    Args:
        x: float tensor of any shape, already divided by its scales; |x| > 6 saturates to ±6.
    Returns:
        uint8 codes of the same shape, 0..15 (bit 3 the sign; -0 encodes as 0; NaN encodes as 0).
    """
    a = x.float().abs()
    code = torch.where(a < 2, torch.round(a * 2), torch.where(a < 4, torch.round(a) + 2, torch.round(a * 0.5) + 4))
    code = code.clamp_(0, 7).nan_to_num_(0).to(torch.uint8)
    sign = ((x < 0) & (code > 0)).to(torch.uint8) << 3
    return code | sign


def decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes (uint8, 0..15) to float32 values of the same shape."""
    return _CODE_VALUES.to(codes.device)[codes.long()]


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Pack uint8 codes [..., K] (K even) into bytes [..., K/2]: element 2j low nibble, 2j+1 high."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_codes: K = {codes.shape[-1]} is odd; two codes share one byte")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """Unpack bytes [..., K/2] into uint8 codes [..., K] (inverse of ``pack_codes``)."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"unpack_codes: expected uint8 packed codes, got {packed.dtype}")
    return torch.stack([packed & 0xF, packed >> 4], dim=-1).flatten(-2)


def quantize(w: torch.Tensor, global_amax: float | torch.Tensor | None = None) -> NvFp4:
    """Quantize a weight to NVFP4 with the ModelOpt recipe (``NVFP4QTensor.quantize``).

    ``weight_scale_2 = amax / (6*448)`` (fp32); per 16-block
    ``weight_scale = e4m3(block_amax / 6 / weight_scale_2)`` (a zero block gets scale 1,
    as ModelOpt does, so nothing divides by zero); codes = round-to-nearest E2M1 of
    ``w / (float(weight_scale) * weight_scale_2)``. Runs on ``w``'s device (only IEEE
    divisions and round-to-nearest-even casts, so CPU and CUDA should agree bit for bit;
    checked on the CPU only).

    Args:
        w: float tensor [N, K] (any float dtype; computed in fp32). K must be a multiple of 16.
            Leading batch dims [..., N, K] quantize several matrices at once, each with its
            own amax (e.g. all experts of a layer); ``weight_scale_2`` then has shape [...].
        global_amax: the tensor-wide amax to use instead of ``w.abs().max()`` (e.g. one
            amax shared by several weights). An all-zero weight gets ``weight_scale_2 = 1/(6*448)``.
    Returns:
        ``NvFp4`` (weight uint8 [..., N, K/2], weight_scale float8_e4m3fn [..., N, K/16],
        weight_scale_2 fp32 [...], i.e. [] for one matrix).
    Raises:
        ValueError: ``w`` has fewer than 2 dims, K is not a multiple of 16, or ``w`` holds NaN/inf.
    """
    if w.dim() < 2:
        raise ValueError(f"quantize: expected a weight [N, K] (or [..., N, K]), got shape {tuple(w.shape)}")
    *lead, n, k = w.shape
    _check_k(k, "quantize")
    w = w.float()
    if not torch.isfinite(w).all():
        raise ValueError("quantize: the weight holds NaN or inf; NVFP4 cannot represent them (fix the weight first)")
    if global_amax is None:
        amax = w.abs().amax(dim=(-2, -1))  # [...]
    else:
        amax = torch.as_tensor(global_amax, dtype=torch.float32, device=w.device).expand(lead)
    amax = torch.where(amax > 0, amax, torch.ones_like(amax))
    scale_2 = (amax / (E2M1_MAX * E4M3_MAX)).to(torch.float32)  # [...]
    blocks = w.reshape(*lead, n, k // BLOCK, BLOCK)  # [..., N, K/16, 16]
    s2 = scale_2.reshape(*lead, 1, 1)
    block_scale = blocks.abs().amax(dim=-1) / E2M1_MAX / s2  # [..., N, K/16]
    block_scale = torch.where(block_scale == 0, torch.ones_like(block_scale), block_scale)
    block_scale = block_scale.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    denom = block_scale.float().unsqueeze(-1) * s2.unsqueeze(-1)  # [..., N, K/16, 1]
    codes = encode_e2m1((blocks / denom).reshape(*lead, n, k))
    return NvFp4(pack_codes(codes), block_scale, scale_2)


def dequantize(
    weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Expand an NVFP4 weight (ModelOpt convention) to a dense [N, K] tensor.

    ``W = e2m1(weight) * weight_scale * weight_scale_2``, computed in fp32, then cast to ``dtype``.
    Leading batch dims are allowed (e.g. stacked experts [E, N, K/2] with a global scale
    per expert [E]), so many small weights expand in one call.

    Args:
        weight: uint8 [..., N, K/2]. weight_scale: float8_e4m3fn [..., N, K/16].
        weight_scale_2: fp32 [...] (or [] / [1] for a single weight), the global multiplier.
    Returns:
        [..., N, K] of ``dtype``.
    Raises:
        ValueError: not uint8, or shapes disagree (the message gives both).
    """
    if weight.dtype != torch.uint8:
        raise ValueError(f"dequantize: expected uint8 packed codes, got {weight.dtype}")
    *lead, n, half = weight.shape
    k = half * 2
    _check_k(k, "dequantize")
    if tuple(weight_scale.shape) != (*lead, n, k // BLOCK):
        raise ValueError(
            f"dequantize: weight_scale has shape {tuple(weight_scale.shape)}, expected {(*lead, n, k // BLOCK)} "
            f"for a weight {tuple(weight.shape)}"
        )
    vals = _BYTE_VALUES.to(weight.device)[weight.long()].reshape(*lead, n, k // BLOCK, BLOCK)  # byte -> (2j low, 2j+1 high)
    global_scale = weight_scale_2.float().reshape(*lead, 1, 1, 1) if lead else weight_scale_2.float().reshape(())
    out = vals * weight_scale.float().unsqueeze(-1) * global_scale
    return out.reshape(*lead, n, k).to(dtype)


def global_from_compressed_tensors(weight_global_scale: torch.Tensor) -> torch.Tensor:
    """compressed-tensors ``weight_global_scale`` (6*448/amax, a divisor, [] or [1]) → ModelOpt ``weight_scale_2`` (fp32 [])."""
    return (1.0 / weight_global_scale.float()).reshape(())


def global_to_compressed_tensors(weight_scale_2: torch.Tensor) -> torch.Tensor:
    """ModelOpt ``weight_scale_2`` (a multiplier) → compressed-tensors ``weight_global_scale`` fp32 [1] (a divisor)."""
    return (1.0 / weight_scale_2.float()).reshape(1)

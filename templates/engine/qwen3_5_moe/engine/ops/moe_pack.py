"""Expert weights repacked at load for the W4A16 MoE kernels (``ops/moe_gemm.py``), exactly.

Checkpoint layout (``weights.ExpertStack``): codes uint8 [E, N, K/2] (element 2j in the low
nibble of byte j, 2j+1 in the high one), e4m3 block scales [E, N, K/16] in a separate tensor.
The kernels want one row's codes and the scales that go with them in the same cache lines, and
codes ordered so that decoding a 32-bit word needs no shuffle. Packed layout, per weight row:

- K is cut into super-groups of ``SG = 256`` elements (K padded with zero codes and zero scales
  up to a multiple of 256; a padded element is exactly 0);
- super-group g of row n is 160 bytes at ``row_bytes * n + 160 * g``: 128 bytes of codes
  (32 little-endian int32 words), then the 16 scales of its 16 groups of 16 elements, each as the bf16 bits of
  ``s × 2^116`` (``SCALE_EXP``; exact for every e4m3 value, and what the kernels multiply codes by as they are:
  ``ops/moe_decode.py``). 11 % more bytes than e4m3 scales, and no scale decoding in the K loop, where the op is
  bound by instructions at decode sizes;
- element ``256 g + 64 i + 2 w + h`` (i = 0..3, w = 0..31, h = 0, 1) sits in nibble ``i + 4 h`` (bits 4(i + 4h)..) of
  word w. So nibbles i and i + 4 of a word are two K-adjacent elements 16 bits apart: one bf16x2 register of the dot
  operand, decoded with two shifts and two masks; nibble pair i of the 32 words is 64 consecutive K elements.

``pack_experts`` / ``unpack_rows`` are exact inverses on the bytes (tested): the packed form holds
the checkpoint's codes and scales bit for bit, nothing is requantized.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SG = 256  # elements per super-group
SG_BYTES = SG // 2 + 2 * (SG // 16)  # 128 code bytes + 16 bf16 scales = 160 (40 int32 words)
SG_WORDS = SG_BYTES // 4
SCALE_EXP = 116  # scales are stored as bf16(s · 2^SCALE_EXP): s ≤ 448 keeps it below bf16's maximum


def _scales_to_bf16_bytes(s: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn [..., G] → uint8 [..., 2G]: the little-endian bf16 bits of s · 2^SCALE_EXP (exact)."""
    return (s.float() * 2.0**SCALE_EXP).to(torch.bfloat16).view(torch.uint8)


def _bf16_bytes_to_scales(b: torch.Tensor) -> torch.Tensor:
    """The inverse of ``_scales_to_bf16_bytes``: uint8 [..., 2G] → float8_e4m3fn [..., G] (exact)."""
    return (b.contiguous().view(torch.bfloat16).float() * 2.0**-SCALE_EXP).to(torch.float8_e4m3fn)


@dataclass
class PackedExperts:
    """One layer's experts in the packed layout (module docstring).

    Attributes:
        w13: uint8 [E, 2I, R13] (rows [0, I) gate, [I, 2I) up), R13 = 160 · cdiv(H, 256).
        g13: fp32 [E, 2], the gate and up global scales (multipliers).
        w2: uint8 [E, H, R2], R2 = 160 · cdiv(I, 256).
        g2: fp32 [E].
        hidden, inter: H and I (unpadded K of the two projections).
    """

    w13: torch.Tensor
    g13: torch.Tensor
    w2: torch.Tensor
    g2: torch.Tensor
    hidden: int
    inter: int

    @property
    def num_experts(self) -> int:
        """E (including a stacked shared expert)."""
        return self.w13.shape[0]


def pack_rows(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Checkpoint rows → packed rows.

    codes: uint8 [..., N, K/2]; scales: float8_e4m3fn (or its uint8 bits) [..., N, K/16], K % 16 == 0.
    Returns uint8 [..., N, 160 · cdiv(K, 256)].
    Raises: ValueError on mismatched shapes.
    """
    *lead, n, half = codes.shape
    k = 2 * half
    if k % 16 or tuple(scales.shape) != (*lead, n, k // 16):
        raise ValueError(f"pack_rows: codes {tuple(codes.shape)} and scales {tuple(scales.shape)} are not NVFP4 rows "
                         "(need codes [..., N, K/2] and scales [..., N, K/16] with K a multiple of 16)")
    n_sg = -(-k // SG)
    pad = n_sg * SG - k
    c = torch.stack((codes & 0xF, codes >> 4), dim=-1).flatten(-2)  # [..., N, K] nibbles
    c = torch.nn.functional.pad(c, (0, pad))
    c = c.reshape(*lead, n, n_sg, 4, 32, 2).permute(*range(len(lead) + 2), -2, -1, -3)  # [..., sg, w, h, i]
    c = c.reshape(*lead, n, n_sg, 32, 4, 2)  # nibble 4h + i of word w
    packed_codes = (c[..., 0] | (c[..., 1] << 4)).reshape(*lead, n, n_sg, 128)  # byte 4w + i//2
    s = scales.view(torch.float8_e4m3fn) if scales.dtype == torch.uint8 else scales
    s = _scales_to_bf16_bytes(torch.nn.functional.pad(s.view(torch.uint8), (0, pad // 16)).view(torch.float8_e4m3fn))
    s = s.reshape(*lead, n, n_sg, 32)
    return torch.cat((packed_codes, s), dim=-1).reshape(*lead, n, n_sg * SG_BYTES).contiguous()


def unpack_rows(packed: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed rows → ``(codes uint8 [..., N, K/2], scales float8_e4m3fn [..., N, K/16])``, the inverse of ``pack_rows``."""
    *lead, n, row_bytes = packed.shape
    n_sg = row_bytes // SG_BYTES
    p = packed.reshape(*lead, n, n_sg, SG_BYTES)
    b = p[..., :128].reshape(*lead, n, n_sg, 32, 4)
    c = torch.stack((b & 0xF, b >> 4), dim=-1).reshape(*lead, n, n_sg, 32, 2, 4)  # [..., w, h, i]
    c = c.permute(*range(len(lead) + 2), -1, -3, -2).reshape(*lead, n, n_sg * SG)[..., :k]
    codes = (c[..., 0::2] | (c[..., 1::2] << 4)).contiguous()
    scales = _bf16_bytes_to_scales(p[..., 128:].reshape(*lead, n, n_sg * 32))[..., : k // 16].contiguous()
    return codes, scales


def pack_experts(w13: torch.Tensor, s13: torch.Tensor, g13: torch.Tensor,
                 w2: torch.Tensor, s2: torch.Tensor, g2: torch.Tensor) -> PackedExperts:
    """``weights.ExpertStack`` tensors (kernels.moe_nvfp4's layout) → ``PackedExperts`` on the same device."""
    return PackedExperts(
        w13=pack_rows(w13, s13), g13=g13.float().contiguous(),
        w2=pack_rows(w2, s2), g2=g2.float().reshape(-1).contiguous(),
        hidden=w13.shape[2] * 2, inter=w2.shape[2] * 2,
    )


def unpack_experts(pk: PackedExperts) -> tuple[torch.Tensor, ...]:
    """``(w13, s13, g13, w2, s2, g2)`` in the checkpoint layout, bit-identical to what was packed."""
    w13, s13 = unpack_rows(pk.w13, pk.hidden)
    w2, s2 = unpack_rows(pk.w2, pk.inter)
    return w13, s13, pk.g13, w2, s2, pk.g2

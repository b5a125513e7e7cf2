"""Weight-format registry: ``bf16`` and ``nvfp4`` (ModelOpt layout, W4A16 on Hopper).

A format says which linears are quantized and how a checkpoint of that format names them.
The NVFP4 facts (E2M1 values, 16-element e4m3 block scales, fp32 global scale) are in
``metainfer.formats.nvfp4``; this module holds only the policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from metainfer.errors import UnknownNameError


@dataclass(frozen=True)
class QuantSpec:
    """One weight format.

    Attributes:
        name: registry name (``bf16``, ``nvfp4``).
        quantized: suffixes of the module names stored quantized (matched against
            ``...mlp.experts.<e>.gate_proj`` and the like); empty for bf16.
        bits_per_weight: average storage bits of a quantized weight, block scales included
            (NVFP4: 4 + 8/16 = 4.5), for roofline byte counts.
        description: one line for ``metainfer targets``.
    """

    name: str
    quantized: tuple[str, ...]
    bits_per_weight: float
    description: str

    def is_quantized(self, module: str) -> bool:
        """True if the linear module named ``module`` (no ``.weight`` suffix) is stored quantized here."""
        return any(module.endswith(s) or f".{s}." in f"{module}." for s in self.quantized) if self.quantized else False


QUANTS: dict[str, QuantSpec] = {
    "bf16": QuantSpec("bf16", (), 16.0, "every weight bf16 (the reference format)"),
    "nvfp4": QuantSpec(
        "nvfp4",
        ("experts", "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"),
        4.5,
        "NVFP4 (ModelOpt) routed and shared expert FFNs, the rest bf16; W4A16 on Hopper, native on Blackwell",
    ),
}


def get_quant(name: str) -> QuantSpec:
    """Look a weight format up by name.

    Raises:
        UnknownNameError: unknown name; the message lists the known ones.
    """
    try:
        return QUANTS[name]
    except KeyError:
        hint = f" (names are lower case: --quant {name.lower()})" if name.lower() in QUANTS else ""
        raise UnknownNameError(f"unknown weight format {name!r}{hint}; known formats: {', '.join(sorted(QUANTS))}") from None

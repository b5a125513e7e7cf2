"""Shared by the red-team attempts of found/ (copy this folder's files into tests/cheats/ to run them): the honest
2-3x CPU speed-up of examples/cpu-tiny/02 (each expert's NVFP4 weights dequantized once, not at every forward),
so that a hidden defect rides on a real, honest speed-up and the gate's verdict on the defect is an acceptance,
not merely 'not faster'. NVFP4 only: run with ``metainfer cheats --quant nvfp4``."""

from pathlib import Path

from . import replace

CACHE = '''

_EXPERT_CACHE = {}


def _expert_weight(packed, scale, e, make):
    key = (packed.data_ptr(), scale.data_ptr(), e)
    hit = _EXPERT_CACHE.get(key)
    if hit is None:
        hit = _EXPERT_CACHE[key] = (packed, scale, make())
    return hit[2]


def moe_nvfp4_ref('''


def dequantize_once(engine_dir: Path) -> None:
    """Apply examples/cpu-tiny/02-dequantize-experts-once.patch by text (engine/kernels/reference.py)."""
    rel = "engine/kernels/reference.py"
    replace(engine_dir, rel, "\n\ndef moe_nvfp4_ref(", CACHE)
    replace(engine_dir, rel, "w_gu = dequant_nvfp4_ref(w13[e], s13[e], g)",
            "w_gu = _expert_weight(w13, s13, e, lambda: dequant_nvfp4_ref(w13[e], s13[e], g))")
    replace(engine_dir, rel, "w_d = dequant_nvfp4_ref(w2[e], s2[e], g2[e])",
            "w_d = _expert_weight(w2, s2, e, lambda: dequant_nvfp4_ref(w2[e], s2[e], g2[e]))")

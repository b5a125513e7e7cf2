"""The compressed-tensors ``nvfp4-pack-quantized`` quantization config (llm-compressor exports).

Only what the reader needs to recognise the convention: ``quant_method: compressed-tensors``
and ``format: nvfp4-pack-quantized``, one config group of 4-bit float weights with group
size 16 over ``Linear`` targets, and the ``ignore`` list.
"""

from __future__ import annotations


def compressed_tensors_config(ignore: list[str]) -> dict:
    """A ``quantization_config`` block as llm-compressor writes it for NVFP4 weights (W4A4 scheme)."""
    args = {"num_bits": 4, "type": "float", "symmetric": True, "group_size": 16, "strategy": "tensor_group",
            "dynamic": False, "observer": "minmax"}
    return {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": args, "input_activations": {**args, "dynamic": "local"},
                                      "format": "nvfp4-pack-quantized"}},
        "ignore": ignore,
    }

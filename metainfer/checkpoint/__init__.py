"""HF-format checkpoints of the Qwen3.5/3.6-MoE family: layout, synthetic writer, lazy reader.

The engine may import this package (docs/CONTRACTS.md "Checkpoints").
"""

from metainfer.checkpoint.layout import TensorSpec, expected_tensors
from metainfer.checkpoint.reader import CheckpointReader
from metainfer.checkpoint.weights import Bf16Linear, ExpertWeights, NvFp4Linear
from metainfer.checkpoint.writer import write_checkpoint

__all__ = [
    "Bf16Linear", "CheckpointReader", "ExpertWeights", "NvFp4Linear", "TensorSpec", "expected_tensors", "write_checkpoint",
]

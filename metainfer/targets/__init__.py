"""Registries of models, weight formats and GPUs, and the target that combines one of each."""

from metainfer.targets.gpus import GPUS, GpuProfile, check_present, detect, get_gpu
from metainfer.targets.models import ModelSpec, get_model, model_names
from metainfer.targets.quant import QUANTS, QuantSpec, get_quant
from metainfer.targets.target import Target, make_target, parse_target

__all__ = [
    "GPUS", "GpuProfile", "check_present", "detect", "get_gpu",
    "ModelSpec", "get_model", "model_names",
    "QUANTS", "QuantSpec", "get_quant",
    "Target", "make_target", "parse_target",
]

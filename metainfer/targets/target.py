"""A target: one model, one weight format, one GPU, named ``<model>-<quant>-<gpu>``."""

from __future__ import annotations

from dataclasses import dataclass

from metainfer.targets.gpus import GPUS, GpuProfile, get_gpu
from metainfer.targets.models import ModelSpec, get_model
from metainfer.targets.quant import QUANTS, QuantSpec, get_quant
from metainfer.errors import UnknownNameError


@dataclass(frozen=True)
class Target:
    """What one build run generates an engine for."""

    model: ModelSpec
    quant: QuantSpec
    gpu: GpuProfile

    @property
    def name(self) -> str:
        """``<model>-<quant>-<gpu>``, e.g. ``qwen3.6-35b-a3b-nvfp4-h200``; also the folder under ``generated/``."""
        return f"{self.model.name}-{self.quant.name}-{self.gpu.name}"

    @property
    def branch(self) -> str:
        """The git branch accepted iterations are committed to."""
        return f"metainfer/{self.name}"


def make_target(model: str, quant: str, gpu: str) -> Target:
    """Build a target from its three names.

    Raises:
        UnknownNameError: any of the three is unknown; the message lists the known names.
    """
    return Target(get_model(model), get_quant(quant), get_gpu(gpu))


def parse_target(name: str) -> Target:
    """Parse ``<model>-<quant>-<gpu>`` back into a target.

    Raises:
        UnknownNameError: the name does not end in a known ``-<quant>-<gpu>`` pair.
    """
    for g in GPUS:
        for q in QUANTS:
            suffix = f"-{q}-{g}"
            if name.endswith(suffix):
                return make_target(name[: -len(suffix)], q, g)
    raise UnknownNameError(f"cannot parse target {name!r}: expected <model>-<quant>-<gpu> with quant in {sorted(QUANTS)} and gpu in {sorted(GPUS)}")

"""GPU profiles: peak bandwidth and matrix rates for roofline figures, and detection.

Datasheet figures are leads; where a figure was measured on the device machine it says so
(DESIGN.md, "The H200 and the peer"). Asking for a profile that is not the device present
is an error (``check_present``), never a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

from metainfer.errors import GpuMismatchError, UnknownNameError


@dataclass(frozen=True)
class GpuProfile:
    """One GPU (or the CPU) as the roofline sees it.

    Attributes:
        name: registry name (``h200``).
        match: lower-case substrings of ``torch.cuda.get_device_name()`` that identify it;
            empty for ``cpu``.
        mem_bw_gbs: usable memory bandwidth, GB/s (1e9 bytes/s).
        bf16_tflops: dense bf16 matrix rate, TFLOP/s.
        fp4_tflops: dense FP4 matrix rate, TFLOP/s (0 where the chip has no FP4 tensor cores).
        memory_gib: device memory, GiB.
        source: where the figures come from.
    """

    name: str
    match: tuple[str, ...]
    mem_bw_gbs: float
    bf16_tflops: float
    fp4_tflops: float
    memory_gib: float
    source: str

    @property
    def native_fp4(self) -> bool:
        """True where NVFP4 matmuls run on FP4 tensor cores (Blackwell); else W4A16."""
        return self.fp4_tflops > 0


GPUS: dict[str, GpuProfile] = {
    "cpu": GpuProfile("cpu", (), 50.0, 1.0, 0.0, 24.0, "nominal figures for the 2-core CPU machine (no roofline claim)"),
    "h100": GpuProfile("h100", ("h100",), 3350.0, 989.0, 0.0, 80.0, "datasheet (SXM)"),
    "h200": GpuProfile(
        "h200", ("h200",), 4250.0, 790.0, 0.0, 139.0,
        "measured 2026-11-30 on the device machine: D2D copy 4.25 TB/s, bf16 matmul 790 TFLOP/s (datasheet 4.8 TB/s, 989)",
    ),
    "b200": GpuProfile("b200", ("b200",), 8000.0, 2250.0, 9000.0, 180.0, "datasheet (dense)"),
}


def get_gpu(name: str) -> GpuProfile:
    """Look a GPU profile up by name.

    Raises:
        UnknownNameError: unknown name; the message lists the known ones.
    """
    try:
        return GPUS[name]
    except KeyError:
        hint = f" (names are lower case: --gpu {name.lower()})" if name.lower() in GPUS else ""
        raise UnknownNameError(f"unknown GPU {name!r}{hint}; known GPUs: {', '.join(sorted(GPUS))}") from None


def detect() -> GpuProfile | None:
    """The profile of the CUDA device present (device 0), or None on a machine without CUDA.

    Raises:
        GpuMismatchError: a CUDA device is present but no profile matches its name.
    """
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.cuda.get_device_name(0)
    for gpu in GPUS.values():
        if any(m in device.lower() for m in gpu.match):
            return gpu
    raise GpuMismatchError(f"no GPU profile matches the device {device!r}; add one to metainfer/targets/gpus.py")


def check_present(name: str, model: str | None = None) -> GpuProfile:
    """Return the profile ``name`` after checking that it is the device present.

    ``cpu`` is always allowed. Any other name must match the CUDA device 0. ``model``: the model the run is for,
    so that on a machine without a GPU the advice names its tiny twin when it is full size (the CPU refuses it).

    Raises:
        UnknownNameError: unknown profile name.
        GpuMismatchError: the requested GPU is not the one present (or no GPU is present).
    """
    gpu = get_gpu(name)
    if gpu.name == "cpu":
        return gpu
    present = detect()
    if present is None:
        twin = _tiny_twin(model)
        raise GpuMismatchError(f"--gpu {name} asked for, but this machine has no CUDA device; use --gpu cpu here"
                               + (f" with the tiny twin, --model {twin} (a full-size model is refused on the CPU)"
                                  if twin else ""))
    if present.name != gpu.name:
        raise GpuMismatchError(f"--gpu {name} asked for, but the device present is {present.name}; use --gpu {present.name}")
    return gpu


def _tiny_twin(model: str | None) -> str | None:
    """The registered tiny twin of a full-size registered ``model`` (``<model>-tiny``), else None (tiny, a path,
    unknown or not given)."""
    from metainfer.targets.models import model_names

    names = set(model_names())
    if not model or model not in names or model.endswith("-tiny"):
        return None
    return f"{model}-tiny" if f"{model}-tiny" in names else None

"""Shared helpers for the engine kernel tests, and tests of the kernels package's dispatch and checks.

Without CUDA the kernels run under the Triton interpreter on CPU tensors. ``triton.jit``, and
triton's own standard library (``tl.sum``, ``tl.sigmoid``) when triton is first imported,
decide then whether to interpret, so ``TRITON_INTERPRET=1`` must be set before anything
imports triton: this module sets it on import (``import torch`` does not import triton), and
the other kernel test modules import this one first. With CUDA nothing is set: the same
odd-shape tests run compiled on the GPU, and the ``gpu``-marked ones at the real shapes.
"""

from __future__ import annotations

import os

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import importlib  # noqa: E402
import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import triton.language as tl  # noqa: E402

KERNELS_DIR = Path(__file__).resolve().parents[1] / "templates/engine/qwen3_5_moe/engine/kernels"

# Tolerances on ‖out − ref‖ / ‖ref‖, fixed before any run:
# - a bf16 output rounded once: at most half an ulp, 2^-9 ≈ 2e-3 relative per element; a kernel
#   and its reference differ only in fp32 summation order, which can flip a rounding (≤ 1 ulp,
#   2^-8), so even if every element flipped the error stays below 4e-3.
TOL_BF16 = 4e-3
# - MoE: the activation silu(gate)·up is rounded to bf16 between the two GEMMs (2^-9) and the
#   output once more: two independent roundings against a float64 computation.
TOL_BF16_TWICE = 6e-3
# - fp32 state after one or a few updates: fp32 epsilon (6e-8) times the reduction length (≤ 128).
TOL_FP32 = 1e-5

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def load_kernels():
    """The kernels package, imported once under the name ``_kernels_under_test`` with BACKEND "triton".

    Raises:
        RuntimeError: on CPU, when triton was imported before TRITON_INTERPRET=1 was set (its
            standard library would then not run in the interpreter); set the variable in
            tests/conftest.py or import this module first.
    """
    name = "_kernels_under_test"
    if name in sys.modules:
        return sys.modules[name]
    if DEVICE == "cpu" and type(tl.sum).__name__ != "InterpretedFunction":
        raise RuntimeError(
            "triton was imported before TRITON_INTERPRET=1 was set, so its kernels cannot run on CPU; "
            "set TRITON_INTERPRET=1 in the environment (or in tests/conftest.py before any triton import)"
        )
    spec = importlib.util.spec_from_file_location(
        name, KERNELS_DIR / "__init__.py", submodule_search_locations=[str(KERNELS_DIR)]
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    mod.BACKEND = "triton"
    importlib.import_module(f"{name}._common").POISON_ALLOCATIONS = True
    return mod


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; inf when either holds a NaN/inf, so NaN never passes."""
    out, ref = out.double(), ref.double()
    assert ref.norm() > 0, "reference is all zeros: the test would prove nothing"
    if not (torch.isfinite(out).all() and torch.isfinite(ref).all()):
        return float("inf")
    return ((out - ref).norm() / ref.norm()).item()


def test_dispatch_follows_backend_and_device():
    k = load_kernels()
    x = torch.randn(3, 48).bfloat16()
    w = torch.randn(48)
    if DEVICE == "cuda":
        x, w = x.cuda(), w.cuda()
    try:
        k.BACKEND = "reference"
        y_ref, _ = k.rmsnorm(x, w, 1e-6)
        k.BACKEND = "auto"  # the reference on CPU tensors, Triton on CUDA ones
        y_auto, _ = k.rmsnorm(x, w, 1e-6)
        k.BACKEND = "triton"
        y_tri, _ = k.rmsnorm(x, w, 1e-6)
        assert torch.equal(y_auto, y_tri if DEVICE == "cuda" else y_ref)
        assert rel_err(y_tri, y_ref) < TOL_BF16
        k.BACKEND = "cuda-please"
        with pytest.raises(ValueError, match="BACKEND"):
            k.rmsnorm(x, w, 1e-6)
    finally:
        k.BACKEND = "triton"


def test_checks_name_the_problem():
    k = load_kernels()
    x = torch.randn(2, 48).bfloat16()
    with pytest.raises(ValueError, match="multiple of 16"):
        k.nvfp4_linear(torch.randn(2, 40).bfloat16(), torch.zeros(8, 20, dtype=torch.uint8),
                       torch.zeros(8, 2).to(torch.float8_e4m3fn), torch.ones(()))
    with pytest.raises(ValueError, match="scale has shape"):
        k.nvfp4_linear(x, torch.zeros(8, 24, dtype=torch.uint8), torch.zeros(8, 2).to(torch.float8_e4m3fn), torch.ones(()))
    with pytest.raises(ValueError, match="dtype"):
        k.rmsnorm(x.float(), torch.ones(48), 1e-6)
    with pytest.raises(ValueError, match="HV = 3 is not a multiple of HK = 2"):
        k.gdn_recurrent_step(torch.randn(1, 2, 8), torch.randn(1, 2, 8), torch.randn(1, 3, 8), torch.randn(1, 3),
                             torch.randn(1, 3), torch.zeros(2, 3, 8, 8), torch.zeros(1, dtype=torch.int32))
    with pytest.raises(ValueError, match="g13"):
        k.moe_nvfp4(x, torch.zeros(2, 1, dtype=torch.int32), torch.ones(2, 1),
                    torch.zeros(3, 32, 24, dtype=torch.uint8), torch.zeros(3, 32, 3).to(torch.float8_e4m3fn),
                    torch.ones(3), torch.zeros(3, 48, 8, dtype=torch.uint8),
                    torch.zeros(3, 48, 1).to(torch.float8_e4m3fn), torch.ones(3))

"""Shared helpers for the prefill op tests (engine/ops/{gdn_chunk,attention_prefill,conv1d_prefill}.py).

``load_op(name)`` imports ``engine/ops/<name>.py`` straight from the template, inside a package
``_engine_prefill_under_test`` whose path is the template's engine folder (its ``__init__`` is not
run: it needs the rendered ``target.py``), with ``kernels.BACKEND = "triton"`` and NaN-poisoned
allocations. Like the kernel tests, on CPU it runs the kernels under the Triton interpreter
(``test_kernels_common`` sets TRITON_INTERPRET=1 before triton is imported).
"""

from __future__ import annotations

from test_kernels_common import DEVICE, KERNELS_DIR, load_kernels, rel_err  # noqa: I001

import importlib
import sys
import types

import pytest
import torch

PKG = "_engine_prefill_under_test"
ENGINE_DIR = KERNELS_DIR.parent


def load_op(name: str):
    """The module ``engine/ops/<name>.py`` of the template (see the module docstring)."""
    load_kernels()  # raises when triton was imported without the interpreter on CPU
    if PKG not in sys.modules:
        pkg = types.ModuleType(PKG)
        pkg.__path__ = [str(ENGINE_DIR)]
        sys.modules[PKG] = pkg
        importlib.import_module(f"{PKG}.kernels").BACKEND = "triton"
        importlib.import_module(f"{PKG}.kernels._common").POISON_ALLOCATIONS = True
    return importlib.import_module(f"{PKG}.ops.{name}")


def cu_of(lens: list[int], device=DEVICE) -> torch.Tensor:
    """int32 [N+1] prefix sums of ``lens``."""
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)


def test_ops_dispatch_follows_kernels_backend():
    """The reference runs when kernels.BACKEND says so, and the kernel otherwise; both agree."""
    op = load_op("conv1d_prefill")
    k = sys.modules[f"{PKG}.kernels"]
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(9, 32, generator=gen).bfloat16().to(DEVICE)
    w = torch.randn(32, 4, generator=gen).to(DEVICE)
    st = torch.randn(2, 32, 3, generator=gen).bfloat16().to(DEVICE)
    st_ref = st.clone()
    cu, slots = cu_of([9]), torch.tensor([1], device=DEVICE)
    try:
        k.BACKEND = "reference"
        y_ref = op.causal_conv1d_prefill(x, st_ref, w, cu, slots)
    finally:
        k.BACKEND = "triton"
    y = op.causal_conv1d_prefill(x, st, w, cu, slots)
    assert rel_err(y, y_ref) < 4e-3
    assert torch.equal(st, st_ref)
    with pytest.raises(ValueError, match="slots"):
        op.causal_conv1d_prefill(x, st, w, cu, slots[:0])

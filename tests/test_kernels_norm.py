"""RMSNorm kernels (residual-fused zero-centred norm, GDN gated norm): Triton against the reference,
the reference against HF's modules and float64."""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, gpu, load_kernels, needs_cuda, rel_err  # sets TRITON_INTERPRET first

import pytest
import torch
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeRMSNorm, Qwen3_5MoeRMSNormGated

EPS = 1e-6


def _data(t, h, seed, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(t, h, generator=g) * 3).bfloat16().to(device)
    r = torch.randn(t, h, generator=g).bfloat16().to(device)
    w = (torch.randn(h, generator=g) * 0.1).to(device)
    return x, r, w


@pytest.mark.parametrize("t", [1, 3, 17])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rmsnorm_kernel_matches_reference(t, with_residual):
    k = load_kernels()
    x, r, w = _data(t, 80, seed=t)
    residual = r if with_residual else None
    y, s = k.rmsnorm(x, w, EPS, residual)
    y_ref, s_ref = k.reference.rmsnorm_ref(x, w, EPS, residual)
    assert rel_err(y, y_ref) < TOL_BF16
    assert rel_err(s, s_ref) < TOL_BF16
    if not with_residual:
        assert s is x


@pytest.mark.parametrize("t", [1, 17])
@pytest.mark.parametrize("w_dtype", [torch.float32, torch.bfloat16])
def test_gated_rmsnorm_kernel_matches_reference(t, w_dtype):
    k = load_kernels()
    o, z, w = _data(t, 48, seed=10 + t)
    w = (1 + w).to(w_dtype)
    y = k.gated_rmsnorm(o, z, w, EPS)
    assert rel_err(y, k.reference.gated_rmsnorm_ref(o, z, w, EPS)) < TOL_BF16


@pytest.mark.parametrize("t", [1, 3])
def test_gated_rmsnorm_strided_inputs(t):
    """As gdn.py calls it: o [T, NH, D] contiguous, z a [T, NH·D] column slice of a wider NaN-filled
    block viewed as [T, NH, D] (token stride ≠ NH·D); and a 2-D o with strided rows."""
    k = load_kernels()
    nh, d = 3, 24
    o, z, w = _data(t * nh, d, seed=20 + t)
    wide = torch.full((t, nh * d + 10), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    wide[:, 7 : 7 + nh * d] = z.reshape(t, nh * d)
    z3 = wide[:, 7 : 7 + nh * d].view(t, nh, d)
    y = k.gated_rmsnorm(o.reshape(t, nh, d), z3, 1 + w, EPS)
    assert y.shape == (t, nh, d) and y.is_contiguous()
    y_ref = k.reference.gated_rmsnorm_ref(o, z, 1 + w, EPS)
    assert rel_err(y.reshape(t * nh, d), y_ref) < TOL_BF16
    o_wide = torch.full((t * nh, d + 6), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    o_wide[:, 2 : 2 + d] = o
    y3 = k.gated_rmsnorm(o_wide[:, 2 : 2 + d], z, 1 + w, EPS)  # o rows strided
    assert rel_err(y3, y_ref) < TOL_BF16
    with pytest.raises(ValueError, match="2-D \\[N, D\\] or 3-D"):
        k.gated_rmsnorm(o.reshape(1, t, nh, d), z.reshape(1, t, nh, d), w, EPS)


def test_rmsnorm_reference_is_hf_module():
    k = load_kernels()
    x, r, w = _data(5, 64, seed=3, device="cpu")
    norm = Qwen3_5MoeRMSNorm(64, eps=EPS)
    with torch.no_grad():
        norm.weight.copy_(w)
    y, s = k.reference.rmsnorm_ref(x, w, EPS, r)
    assert torch.equal(s, x + r)  # HF adds the residual in bf16
    assert torch.equal(y, norm(x + r))
    # and against float64: one bf16 rounding of the output
    s64 = (x + r).double()
    y64 = s64 / torch.sqrt(s64.pow(2).mean(-1, keepdim=True) + EPS) * (1 + w.double())
    assert rel_err(y, y64) < TOL_BF16


def test_gated_rmsnorm_reference_is_hf_module():
    k = load_kernels()
    o, z, w = _data(7, 48, seed=4, device="cpu")
    norm = Qwen3_5MoeRMSNormGated(48, eps=EPS).to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(1 + w)
    assert torch.equal(k.reference.gated_rmsnorm_ref(o, z, norm.weight.data, EPS), norm(o, gate=z))


@gpu
@needs_cuda
def test_norms_real_shapes_cuda():
    k = load_kernels()
    x, r, w = _data(300, 2048, seed=5, device="cuda")
    y, s = k.rmsnorm(x, w, EPS, r)
    y_ref, s_ref = k.reference.rmsnorm_ref(x, w, EPS, r)
    assert rel_err(y, y_ref) < TOL_BF16 and rel_err(s, s_ref) < TOL_BF16
    o, z, wg = _data(64 * 32, 128, seed=6, device="cuda")
    assert rel_err(k.gated_rmsnorm(o, z, wg, EPS), k.reference.gated_rmsnorm_ref(o, z, wg, EPS)) < TOL_BF16
    proj = torch.randn(64, 8192 + 4096 + 64, device="cuda").bfloat16()  # decode: z a column slice of in_proj's output
    z3 = proj[:, 8192 : 8192 + 4096].view(64, 32, 128)
    y = k.gated_rmsnorm(o.view(64, 32, 128), z3, wg, EPS)
    assert rel_err(y, k.reference.gated_rmsnorm_ref(o.view(64, 32, 128), z3, wg, EPS)) < TOL_BF16

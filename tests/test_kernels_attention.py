"""Decode attention kernel against its plain-torch reference, under the Triton interpreter on CPU
and at the real shapes on CUDA."""

from test_kernels_common import DEVICE, load_kernels  # sets TRITON_INTERPRET first

import importlib

import pytest
import torch

ad = importlib.import_module(f"{load_kernels().__name__}.attention_decode")


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    return float("inf") if err != err else err  # NaN never passes


def _case(device, s, cache_len, hkv, hq, d, lens, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    k = torch.randn(s, cache_len, hkv, d, generator=g).bfloat16().to(device)
    v = torch.randn(s, cache_len, hkv, d, generator=g).bfloat16().to(device)
    q = torch.randn(len(lens), hq, d, generator=g).bfloat16().to(device)
    slots = torch.randperm(s, generator=g)[: len(lens)].to(torch.int32).to(device)
    # positions past each sequence's length hold NaN: reading them would poison the output
    for i, n in enumerate(lens):
        k[slots[i], n:] = float("nan")
        v[slots[i], n:] = float("nan")
    return q, k, v, slots, torch.tensor(lens, dtype=torch.int32, device=device)


# bf16 inputs, fp32 softmax and accumulation, bf16 output: the kernel and the reference differ
# only in summation order (≈1e-6) before the final bf16 rounding (2^-9 ≈ 2e-3 relative per element)
TOL = 4e-3


@pytest.mark.parametrize("lens,splits,block_n", [([1], 1, 16), ([63, 1, 65], 4, 16), ([64, 100, 17], 3, 32)])
def test_decode_attention_matches_reference(lens, splits, block_n):
    """Odd shapes: under the interpreter on CPU, compiled on CUDA."""
    q, k, v, slots, lens_t = _case(DEVICE, 5, 100, 2, 8, 32, lens, seed=len(lens) * 7 + splits)
    out = ad.attention_decode(q, k, v, slots, lens_t, 32**-0.5, splits=splits, block_n=block_n)
    ref = ad.attention_decode_ref(q, k, v, slots, lens_t, 32**-0.5)
    assert not torch.isnan(ref).any()
    assert _rel(out, ref) < TOL


@pytest.mark.parametrize("lens,splits", [([7, 1, 40], 3), ([100], 1)])
def test_decode_attention_gate_is_fused_into_the_combine(lens, splits):
    """With a gate the output is ``bf16(attn) * sigmoid(gate)`` in bf16, the gate read through a
    strided view (per head [q | gate] rows of the projection)."""
    q, k, v, slots, lens_t = _case(DEVICE, 5, 100, 2, 8, 32, lens, seed=11)
    proj = (torch.randn(len(lens), 8, 2 * 32, generator=torch.Generator().manual_seed(2)).bfloat16() * 2).to(DEVICE)
    gate = proj[..., 32:]  # strided: 64 apart per head
    out = ad.attention_decode(q, k, v, slots, lens_t, 32**-0.5, splits=splits, block_n=16, gate=gate)
    ref = ad.attention_decode_ref(q, k, v, slots, lens_t, 32**-0.5, gate=gate)
    plain = ad.attention_decode_ref(q, k, v, slots, lens_t, 32**-0.5)
    assert _rel(out, ref) < TOL
    assert _rel(plain, ref) > 0.1  # the gate changed the output: the test can fail


def test_decode_attention_reference_matches_float64():
    q, k, v, slots, lens_t = _case("cpu", 3, 40, 1, 3, 16, [5, 40], seed=1)
    ref = ad.attention_decode_ref(q, k, v, slots, lens_t, 0.25)
    for i, n in enumerate([5, 40]):
        kk = k[slots[i], :n, 0].double()
        vv = v[slots[i], :n, 0].double()
        p = torch.softmax(q[i].double() @ kk.T * 0.25, dim=-1)
        assert torch.allclose(ref[i].double(), p @ vv, rtol=1e-2, atol=1e-2)


def test_decode_attention_rejects_mismatched_head_dim():
    q = torch.randn(1, 4, 32).bfloat16()
    k = torch.randn(2, 8, 2, 16).bfloat16()
    with pytest.raises(ValueError, match="attention_decode"):
        ad.attention_decode(q, k, k, torch.tensor([0]), torch.tensor([1], dtype=torch.int32), 1.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("lens", [[1], [257, 512, 3, 1000] * 8])
def test_decode_attention_real_shapes_cuda(lens):
    q, k, v, slots, lens_t = _case("cuda", 40, 1024, 2, 16, 256, lens, seed=3)
    gate = torch.randn(len(lens), 16, 256, device="cuda").bfloat16()
    for g in (None, gate):
        out = ad.attention_decode(q, k, v, slots, lens_t, 256**-0.5, gate=g)
        ref = ad.attention_decode_ref(q, k, v, slots, lens_t, 256**-0.5, gate=g)
        assert _rel(out, ref) < TOL

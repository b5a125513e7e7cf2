"""NVFP4 W4A16 kernels (nvfp4_linear, moe_nvfp4): Triton against the reference, the reference
against float64 (metainfer.formats.nvfp4.dequantize, HF's Qwen3_5MoeExperts)."""

from __future__ import annotations

from test_kernels_common import (  # sets TRITON_INTERPRET first
    DEVICE,
    TOL_BF16,
    TOL_BF16_TWICE,
    gpu,
    load_kernels,
    needs_cuda,
    rel_err,
)

import pytest
import torch
from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeExperts

from metainfer.formats import nvfp4

E4M3_NAN = 0x7F  # float8_e4m3fn NaN bit pattern


def _quant(n, k, seed, amp=1.0):
    g = torch.Generator().manual_seed(seed)
    q = nvfp4.quantize(torch.randn(n, k, generator=g) * amp)
    return q.weight, q.weight_scale, q.weight_scale_2


def _experts(n_exp, hidden, inter, seed):
    """Fused expert weights in the kernel layout; up rows scaled ×3 so gate and up globals differ."""
    w13, s13, g13, w2, s2, g2 = [], [], [], [], [], []
    for e in range(n_exp):
        gw, gs, gg = _quant(inter, hidden, seed + 3 * e)
        uw, us, ug = _quant(inter, hidden, seed + 3 * e + 1, amp=3.0)
        dw, ds, dg = _quant(hidden, inter, seed + 3 * e + 2)
        w13.append(torch.cat([gw, uw]))
        s13.append(torch.cat([gs, us]))
        g13.append(torch.stack([gg, ug]))
        w2.append(dw)
        s2.append(ds)
        g2.append(dg)
    return [torch.stack(t) for t in (w13, s13, g13, w2, s2, g2)]


def _routing(t, top_k, n_hit, seed):
    """Ids drawn from the first n_hit experts only (the rest stay unhit), renormalised weights."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(n_hit, generator=g)[:top_k] for _ in range(t)]).to(torch.int32)
    w = torch.rand(t, top_k, generator=g) + 0.1
    return ids, w / w.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    "m,n,k_dim,launch",
    [
        (1, 40, 80, {}),  # GEMV, K not a multiple of the K block
        (1, 40, 80, {"gemv_words": 0}),  # GEMV reading bytes instead of int32 words
        (3, 24, 48, {"gemv_max_m": 4}),  # GEMV with several rows
        (3, 40, 80, {"gemv_max_m": 0}),  # tl.dot, M < 16
        (17, 24, 48, {"block_m": 16}),
        (65, 40, 80, {"block_m": 32}),
    ],
)
def test_nvfp4_linear_kernel_matches_reference(m, n, k_dim, launch):
    k = load_kernels()
    w, s, g = (t.to(DEVICE) for t in _quant(n, k_dim, seed=m))
    x = torch.randn(m, k_dim, generator=torch.Generator().manual_seed(m + 1)).bfloat16().to(DEVICE)
    small = {"gemv_block_n": 16, "gemv_block_k": 32, "block_n": 16, "block_k": 32}
    y = k.nvfp4_linear(x, w, s, g, **small, **launch)
    assert y.shape == (m, n)
    assert rel_err(y, k.reference.nvfp4_linear_ref(x, w, s, g)) < TOL_BF16


def test_nvfp4_linear_reference_matches_float64():
    k = load_kernels()
    w, s, g = _quant(24, 64, seed=5)
    x = torch.randn(5, 64).bfloat16()
    w64 = nvfp4.dequantize(w, s, g, dtype=torch.float64)
    assert torch.equal(k.reference.dequant_nvfp4_ref(w, s, g), w64.float())
    assert rel_err(k.reference.nvfp4_linear_ref(x, w, s, g), x.double() @ w64.T) < TOL_BF16


@pytest.mark.parametrize("t,launch", [
    (1, {}), (3, {}), (1, {"gemv_words": 0}), (3, {"gemv_unroll": 0}), (2, {"gemv_words": 0, "gemv_unroll": 0}),
    (3, {"gemv_max_t": 0}), (17, {}), (65, {"block_m": 32}),
])
def test_moe_kernel_matches_reference(t, launch):
    """E = 6 with experts 4, 5 never hit (their scales are NaN: reading them would poison the output);
    ids repeat across tokens; t ≤ 4 takes the GEMV path unless gemv_max_t says otherwise."""
    k = load_kernels()
    w13, s13, g13, w2, s2, g2 = _experts(6, 48, 32, seed=100)
    s13[4:].view(torch.uint8).fill_(E4M3_NAN)
    s2[4:].view(torch.uint8).fill_(E4M3_NAN)
    ids, tw = _routing(t, 2, n_hit=4, seed=t)
    x = torch.randn(t, 48, generator=torch.Generator().manual_seed(t)).bfloat16()
    args = [a.to(DEVICE) for a in (x, ids, tw, w13, s13, g13, w2, s2, g2)]
    small = {"gemv_block_n": 16, "gemv_block_k": 32, "block_n": 16, "block_k": 32}
    y = k.moe_nvfp4(*args, **small, **launch)
    assert y.shape == (t, 48)
    assert rel_err(y, k.reference.moe_nvfp4_ref(*args)) < TOL_BF16


def test_moe_align_pads_each_expert_to_the_block():
    k = load_kernels()
    from importlib import import_module

    align = import_module(f"{k.__name__}.moe").moe_align
    ids = torch.tensor([[2, 0], [2, 5], [0, 2]])
    sorted_ids, block_expert = align(ids, n_experts=6, block_m=4)
    assert block_expert.tolist()[:3] == [0, 2, 5]
    assert all(e == -1 for e in block_expert.tolist()[3:])
    blocks = sorted_ids.view(-1, 4).tolist()
    assert blocks[0] == [1, 4, 6, 6] and blocks[1] == [0, 2, 5, 6] and blocks[2] == [3, 6, 6, 6]


def test_moe_reference_matches_hf_experts_float64():
    k = load_kernels()
    n_exp, hidden, inter, t = 5, 32, 16, 9
    w13, s13, g13, w2, s2, g2 = _experts(n_exp, hidden, inter, seed=7)
    ids, tw = _routing(t, 3, n_hit=4, seed=8)
    x = torch.randn(t, hidden).bfloat16()
    cfg = Qwen3_5MoeTextConfig(num_experts=n_exp, hidden_size=hidden, moe_intermediate_size=inter, hidden_act="silu")
    experts = Qwen3_5MoeExperts(cfg).double()
    with torch.no_grad():
        for e in range(n_exp):
            gate = nvfp4.dequantize(w13[e, :inter], s13[e, :inter], g13[e, 0], dtype=torch.float64)
            up = nvfp4.dequantize(w13[e, inter:], s13[e, inter:], g13[e, 1], dtype=torch.float64)
            experts.gate_up_proj[e] = torch.cat([gate, up])
            experts.down_proj[e] = nvfp4.dequantize(w2[e], s2[e], g2[e], dtype=torch.float64)
        y64 = experts(x.double(), ids.long(), tw.double())
    assert rel_err(k.reference.moe_nvfp4_ref(x, ids, tw, w13, s13, g13, w2, s2, g2), y64) < TOL_BF16_TWICE


def _random_nvfp4(shape_n_k, lead, device, seed):
    """Valid random NVFP4 bytes at real sizes (quantizing 256 experts would take longer than the test)."""
    g = torch.Generator(device=device).manual_seed(seed)
    n, k_dim = shape_n_k
    w = torch.randint(0, 256, (*lead, n, k_dim // 2), dtype=torch.uint8, device=device, generator=g)
    s = (torch.rand(*lead, n, k_dim // 16, device=device, generator=g) * 2 + 0.25).to(torch.float8_e4m3fn)
    return w, s


@gpu
@needs_cuda
@pytest.mark.parametrize("m,words", [(1, 1), (1, 0), (2, 1), (16, 1), (300, 1)])
def test_nvfp4_linear_real_shapes_cuda(m, words):
    k = load_kernels()
    w, s = _random_nvfp4((1024, 2048), (), "cuda", seed=m)
    g = torch.tensor(0.01, device="cuda")
    x = torch.randn(m, 2048, device="cuda").bfloat16()
    y = k.nvfp4_linear(x, w, s, g, gemv_words=words)
    assert rel_err(y, k.reference.nvfp4_linear_ref(x, w, s, g)) < TOL_BF16


@gpu
@needs_cuda
@pytest.mark.parametrize("t,flags", [(1, {}), (1, {"gemv_words": 0, "gemv_unroll": 0}), (4, {"gemv_unroll": 0}), (9, {}), (64, {}), (513, {})])
def test_moe_real_shapes_cuda(t, flags):
    k = load_kernels()
    n_exp, hidden, inter, top_k = 256, 2048, 512, 8
    w13, s13 = _random_nvfp4((2 * inter, hidden), (n_exp,), "cuda", seed=1)
    w2, s2 = _random_nvfp4((hidden, inter), (n_exp,), "cuda", seed=2)
    g13 = torch.rand(n_exp, 2, device="cuda") * 0.01 + 0.001
    g2 = torch.rand(n_exp, device="cuda") * 0.01 + 0.001
    logits = torch.randn(t, n_exp, device="cuda")
    tw, ids = torch.softmax(logits, -1).topk(top_k, dim=-1)
    tw = tw / tw.sum(-1, keepdim=True)
    x = torch.randn(t, hidden, device="cuda").bfloat16()
    args = (x, ids.to(torch.int32), tw, w13, s13, g13, w2, s2, g2)
    assert rel_err(k.moe_nvfp4(*args, **flags), k.reference.moe_nvfp4_ref(*args)) < TOL_BF16

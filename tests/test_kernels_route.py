"""route_topk (fused softmax + top-k + renormalise, optional shared-expert pair): Triton against
the reference, and the reference against HF's router (the engine's stacked shared expert is
tested in test_engine_layers.py)."""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, gpu, load_kernels, needs_cuda, rel_err  # sets TRITON_INTERPRET first

import pytest
import torch
from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeTopKRouter


def _logits(t: int, cols: int, seed: int, dtype=torch.bfloat16) -> torch.Tensor:
    """Distinct logits per row (a permutation of j/64 - 2, exact in bf16): no ties, so ids are unique."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randperm(cols, generator=g).float() / 64 - 2 for _ in range(t)]
    return torch.stack(rows).to(dtype)


@pytest.mark.parametrize("t,n_exp,top_k,shared", [(1, 16, 4, False), (3, 20, 8, True), (17, 7, 1, True), (5, 256, 8, True)])
def test_route_kernel_matches_reference(t, n_exp, top_k, shared):
    k = load_kernels()
    logits = _logits(t, n_exp + int(shared), seed=t * 31 + n_exp).to(DEVICE)
    ids, w = k.route_topk(logits, top_k, shared)
    ids_ref, w_ref = k.reference.route_topk_ref(logits, top_k, shared)
    assert ids.shape == w.shape == (t, top_k + int(shared)) and ids.dtype == torch.int64
    assert torch.equal(ids.cpu(), ids_ref.cpu())
    assert rel_err(w, w_ref) < 1e-6
    assert torch.allclose(w[:, :top_k].sum(-1).cpu(), torch.ones(t), atol=1e-6)
    if shared:
        assert (ids[:, -1] == n_exp).all()


def test_route_kernel_fp32_logits_and_strided_rows():
    k = load_kernels()
    wide = _logits(4, 40, seed=3, dtype=torch.float32).to(DEVICE)
    logits = wide[:, :33]  # rows strided: 40 apart
    ids, w = k.route_topk(logits, 6, True)
    ids_ref, w_ref = k.reference.route_topk_ref(logits, 6, True)
    assert torch.equal(ids.cpu(), ids_ref.cpu()) and rel_err(w, w_ref) < 1e-6


def test_route_reference_matches_hf_router_and_bf16_shared_gate():
    k = load_kernels()
    cfg = Qwen3_5MoeTextConfig(hidden_size=32, num_experts=12, num_experts_per_tok=3)
    router = Qwen3_5MoeTopKRouter(cfg)
    torch.nn.init.normal_(router.weight, std=0.5)
    x = torch.randn(6, 32, generator=torch.Generator().manual_seed(0))
    _, hf_w, hf_ids = router(x)
    logits = torch.nn.functional.linear(x, router.weight)
    gate_logit = torch.randn(6, 1, generator=torch.Generator().manual_seed(1))
    ids, w = k.reference.route_topk_ref(torch.cat([logits, gate_logit], -1), 3, True)
    assert torch.equal(ids[:, :3], hf_ids)
    assert rel_err(w[:, :3], hf_w.float()) < 1e-6
    bf16_gate = torch.sigmoid(gate_logit.bfloat16()).float()  # HF runs the shared gate in bf16
    assert torch.equal(w[:, 3:], bf16_gate)


def test_route_ties_go_to_the_lowest_id_and_nan_stays_in_range():
    k = load_kernels()
    logits = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.0, 0.5, -1.0],
                           [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]).bfloat16().to(DEVICE)
    ids, w = k.route_topk(logits, 2)
    ids_ref, w_ref = k.reference.route_topk_ref(logits, 2)
    assert ids.cpu().tolist() == ids_ref.cpu().tolist() == [[0, 2], [0, 1]]
    assert rel_err(w, w_ref) < 1e-6
    poisoned = torch.full((1, 9), float("nan")).bfloat16().to(DEVICE)
    ids, _ = k.route_topk(poisoned, 3, True)
    assert ids[0, :3].max() < 8 and ids[0, :3].min() >= 0  # never past the routed experts


def test_route_checks_name_the_problem():
    k = load_kernels()
    with pytest.raises(ValueError, match="top_k = 9 must be in"):
        k.route_topk(torch.randn(2, 9), 9, True)
    with pytest.raises(ValueError, match="dtype"):
        k.route_topk(torch.randn(2, 9).half(), 2)


@gpu
@needs_cuda
def test_route_kernel_real_shapes():
    k = load_kernels()
    for t in (1, 32, 2048):
        logits = _logits(t, 257, seed=t).cuda()
        ids, w = k.route_topk(logits, 8, True)
        ids_ref, w_ref = k.reference.route_topk_ref(logits, 8, True)
        assert torch.equal(ids, ids_ref) and rel_err(w, w_ref) < 1e-6

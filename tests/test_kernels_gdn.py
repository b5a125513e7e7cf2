"""Gated DeltaNet kernels (recurrent step, with the gates fused in too, conv1d update) and the prefill
references: Triton against the reference, references against HF's functions and a float64 loop,
chunked prefill against the recurrent step at every split point. Decode inputs that are column
slices of in_proj's output are tested as such, with NaN in the columns around them."""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, TOL_FP32, gpu, load_kernels, needs_cuda, rel_err  # noqa: I001

import pytest
import torch
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hf


def _gdn_inputs(b, hk, hv, dk, dv, n_slots, seed, device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hk, dk, generator=g).bfloat16()
    k = torch.randn(b, hk, dk, generator=g).bfloat16()
    v = torch.randn(b, hv, dv, generator=g).bfloat16()
    gate = -torch.rand(b, hv, generator=g) * 2  # log decay ≤ 0
    beta = torch.rand(b, hv, generator=g)
    state = torch.full((n_slots, hv, dk, dv), float("nan"))  # rows not in slots must stay untouched
    slots = torch.randperm(n_slots, generator=g)[:b].to(torch.int32)
    state[slots.long()] = torch.randn(b, hv, dk, dv, generator=g) * 0.5
    return [t.to(device) for t in (q, k, v, gate, beta, state, slots)]


@pytest.mark.parametrize("b,hk,hv,dk,dv,block_v", [(1, 1, 2, 16, 16, 16), (3, 2, 4, 48, 24, 16), (2, 2, 2, 32, 40, 32)])
def test_gdn_step_kernel_matches_reference(b, hk, hv, dk, dv, block_v):
    k = load_kernels()
    q, kk, v, g, beta, state, slots = _gdn_inputs(b, hk, hv, dk, dv, n_slots=b + 2, seed=b * dk)
    state_ref = state.clone()
    o = k.gdn_recurrent_step(q, kk, v, g, beta, state, slots, block_v=block_v)
    o_ref = k.reference.gdn_recurrent_step_ref(q, kk, v, g, beta, state_ref, slots)
    assert rel_err(o, o_ref) < TOL_BF16
    used = slots.long()
    assert rel_err(state[used], state_ref[used]) < TOL_FP32
    unused = torch.ones(state.shape[0], dtype=torch.bool, device=state.device)
    unused[used] = False
    assert torch.isnan(state[unused]).all()


def _gate_inputs(b, hv, seed, device=DEVICE):
    """a, b: bf16 [B, HV] column slices of a NaN-filled [B, 3·HV + 5] block (row stride ≠ HV, as
    in_proj's output), a spanning softplus's regimes (one entry above the threshold 20, one at
    −40); A_log, dt_bias fp32 [HV] (A_log = log A, A in [0.37, 2.7])."""
    gen = torch.Generator().manual_seed(seed)
    wide = torch.full((b, 3 * hv + 5), float("nan"))
    wide[:, 1 : 1 + hv] = torch.randn(b, hv, generator=gen) * 4
    wide[:, 2 * hv + 3 : 3 * hv + 3] = torch.randn(b, hv, generator=gen) * 2
    wide[0, 1], wide[0, hv] = 30.0, -40.0
    wide = wide.bfloat16().to(device)
    a_log = (torch.rand(hv, generator=gen) * 2 - 1).to(device)
    dt_bias = torch.randn(hv, generator=gen).to(device)
    return wide[:, 1 : 1 + hv], wide[:, 2 * hv + 3 : 3 * hv + 3], a_log, dt_bias


@pytest.mark.parametrize("b,hk,hv,dk,dv,block_v", [(1, 1, 2, 16, 16, 16), (3, 2, 4, 48, 24, 16)])
def test_gdn_step_gated_kernel_matches_reference(b, hk, hv, dk, dv, block_v):
    k = load_kernels()
    q, kk, v, _, _, state, slots = _gdn_inputs(b, hk, hv, dk, dv, n_slots=b + 2, seed=7 + b)
    a, bb, a_log, dt_bias = _gate_inputs(b, hv, seed=b)
    assert a.stride(0) != hv and bb.stride(0) != hv
    s0 = state.clone()
    state_ref = state.clone()
    o = k.gdn_recurrent_step_gated(q, kk, v, a, bb, a_log, dt_bias, state, slots, block_v=block_v)
    o_ref = k.reference.gdn_recurrent_step_gated_ref(q, kk, v, a, bb, a_log, dt_bias, state_ref, slots)
    assert rel_err(o, o_ref) < TOL_BF16
    used = slots.long()
    assert rel_err(state[used], state_ref[used]) < TOL_FP32
    assert torch.equal(state.isnan(), state_ref.isnan())  # rows outside slots untouched (NaN)
    # the reference is the plain step fed HF's gate formulas (beta kept in fp32, HF rounds it to bf16)
    g = -a_log.exp() * torch.nn.functional.softplus(a.float() + dt_bias)
    o_plain = k.reference.gdn_recurrent_step_ref(q, kk, v, g, torch.sigmoid(bb.float()), s0, slots)
    assert torch.equal(o_plain, o_ref) and torch.equal(s0[used], state_ref[used])


def test_gdn_step_gated_checks_name_the_problem():
    k = load_kernels()
    q, kk, v, _, _, state, slots = _gdn_inputs(1, 1, 2, 8, 8, n_slots=2, seed=0, device="cpu")
    a, bb, a_log, dt_bias = _gate_inputs(1, 2, seed=0, device="cpu")
    with pytest.raises(ValueError, match="A_log has dtype"):
        k.gdn_recurrent_step_gated(q, kk, v, a, bb, a_log.bfloat16(), dt_bias, state, slots)
    with pytest.raises(ValueError, match="dt_bias has shape"):
        k.gdn_recurrent_step_gated(q, kk, v, a, bb, a_log, dt_bias[:1], state, slots)
    with pytest.raises(ValueError, match="a must have a contiguous last dim"):
        k.gdn_recurrent_step_gated(q, kk, v, torch.stack([a, a], -1)[..., 0], bb, a_log, dt_bias, state, slots)


def test_gdn_step_reference_matches_hf_and_float64():
    k = load_kernels()
    q, kk, v, g, beta, state, slots = _gdn_inputs(2, 2, 4, 16, 8, n_slots=3, seed=1, device="cpu")
    s0 = state[slots.long()].clone()
    o = k.reference.gdn_recurrent_step_ref(q, kk, v, g, beta, state, slots)
    # qk heads repeated for HF here: transformers before 5.24 expects HK = HV in this function
    qr, kr = q.repeat_interleave(2, dim=1), kk.repeat_interleave(2, dim=1)
    o_hf, s_hf = hf.torch_recurrent_gated_delta_rule(
        qr[:, None], kr[:, None], v[:, None], g[:, None], beta[:, None],
        initial_state=s0, output_final_state=True, use_qk_l2norm_in_kernel=True,
    )
    assert rel_err(o, o_hf[:, 0]) < TOL_BF16
    assert rel_err(state[slots.long()], s_hf) < TOL_FP32
    # float64, written per head with explicit matrices: S ← S e^g; S ← S + k βᵀ(v − Sᵀk); o = Sᵀq
    for i in range(2):
        for h in range(4):
            qh, kh = q[i, h // 2].double(), kk[i, h // 2].double()
            qh, kh = qh / torch.sqrt(qh @ qh + 1e-6) / 4.0, kh / torch.sqrt(kh @ kh + 1e-6)
            s = s0[i, h].double() * torch.exp(g[i, h].double())
            s = s + torch.outer(kh, beta[i, h].double() * (v[i, h].double() - s.T @ kh))
            assert rel_err(state[slots[i], h], s) < TOL_FP32
            assert rel_err(o[i, h], s.T @ qh) < TOL_BF16


@pytest.mark.parametrize("b,c,width,block_c,strided", [(1, 40, 4, 16, False), (3, 64, 4, 32, True), (2, 24, 2, 16, True)])
def test_conv1d_update_kernel_matches_reference(b, c, width, block_c, strided):
    """strided: x is a column slice of a wider NaN-filled block (in_proj's output), read in place."""
    k = load_kernels()
    gen = torch.Generator().manual_seed(c + b)
    x = torch.randn(b, c, generator=gen).bfloat16().to(DEVICE)
    if strided:
        wide = torch.full((b, c + 13), float("nan"), dtype=torch.bfloat16, device=DEVICE)
        wide[:, 5 : 5 + c] = x
        x = wide[:, 5 : 5 + c]
    weight = torch.randn(c, width, generator=gen).to(DEVICE)
    state = torch.full((b + 2, c, width - 1), float("nan")).bfloat16()
    slots = torch.randperm(b + 2, generator=gen)[:b].to(torch.int32)
    state[slots.long()] = torch.randn(b, c, width - 1, generator=gen).bfloat16()
    state, slots = state.to(DEVICE), slots.to(DEVICE)
    state_ref = state.clone()
    y = k.causal_conv1d_update(x, state, weight, slots, block_c=block_c)
    y_ref = k.reference.causal_conv1d_update_ref(x, state_ref, weight, slots)
    assert rel_err(y, y_ref) < TOL_BF16
    assert torch.equal(state.isnan(), state_ref.isnan())  # rows outside slots untouched (NaN)
    used = slots.long()
    assert torch.equal(state[used], state_ref[used])
    assert torch.equal(state[used, :, -1], x)


def test_conv1d_references_match_hf():
    k = load_kernels()
    gen = torch.Generator().manual_seed(2)
    c, width, t = 12, 4, 7
    x = torch.randn(t, c, generator=gen)
    weight = torch.randn(c, width, generator=gen)
    # prefill from a zero state is HF causal_conv1d_fn; fp32 so HF computes in fp32 too
    state = torch.zeros(2, c, width - 1)
    y = k.ref_prefill.causal_conv1d_prefill_ref(x, state, weight, torch.tensor([0, t]), torch.tensor([1]))
    y_hf = hf.causal_conv1d_fn(x.T[None], weight, None, activation="silu")[0].T
    assert rel_err(y, y_hf) < TOL_FP32
    assert torch.equal(state[1], x[-(width - 1):].T) and torch.equal(state[0], torch.zeros(c, width - 1))
    # one more token is HF causal_conv1d_update on that state
    x1 = torch.randn(1, c, generator=gen)
    hf_state = state[1:2].clone()
    y1 = k.reference.causal_conv1d_update_ref(x1, state, weight, torch.tensor([1]))
    y1_hf = hf.causal_conv1d_update(x1[..., None], hf_state, weight, None, activation="silu")[..., 0]
    assert rel_err(y1, y1_hf) < TOL_FP32
    assert torch.equal(state[1:2], hf_state)


def test_chunk_prefill_agrees_with_recurrent_steps_and_hf():
    """Sequences of 1, 5 and 19 tokens from random initial states, chunk 4 (crosses chunk borders)."""
    k = load_kernels()
    gen = torch.Generator().manual_seed(3)
    hk, hv, dk, dv, lens = 1, 2, 16, 8, [1, 5, 19]
    t = sum(lens)
    q, kk = (torch.randn(t, hk, dk, generator=gen).bfloat16() for _ in range(2))
    v = torch.randn(t, hv, dv, generator=gen).bfloat16()
    g = -torch.rand(t, hv, generator=gen)
    beta = torch.rand(t, hv, generator=gen)
    state = torch.randn(4, hv, dk, dv, generator=gen) * 0.3
    s0 = state.clone()
    cu = torch.tensor([0, 1, 6, 25])
    slots = torch.tensor([2, 0, 3])
    o = k.gdn_chunk_prefill(q, kk, v, g, beta, state, cu, slots, chunk_size=4)
    s_step = s0.clone()
    for i, slot in enumerate(slots.tolist()):
        for p in range(cu[i], cu[i + 1]):
            o_p = k.reference.gdn_recurrent_step_ref(
                q[p : p + 1], kk[p : p + 1], v[p : p + 1], g[p : p + 1], beta[p : p + 1], s_step, torch.tensor([slot])
            )
            assert rel_err(o[p : p + 1], o_p) < TOL_BF16
    assert rel_err(state, s_step) < TOL_FP32
    a, b = 6, 25  # the third sequence against HF's own chunked function
    qr, kr = q.repeat_interleave(hv // hk, dim=1), kk.repeat_interleave(hv // hk, dim=1)  # HK = HV for old HF
    o_hf, s_hf = hf.torch_chunk_gated_delta_rule(
        qr[None, a:b], kr[None, a:b], v[None, a:b], g[None, a:b], beta[None, a:b], chunk_size=4,
        initial_state=s0[3:4], output_final_state=True, use_qk_l2norm_in_kernel=True,
    )
    assert rel_err(o[a:b], o_hf[0]) < TOL_BF16
    assert rel_err(state[3], s_hf[0]) < TOL_FP32


def _varlen(lens, hk, hv, dk, dv, c, seed, device=DEVICE):
    """Packed sequences of the given lengths with NaN rows in the states outside their slots."""
    gen = torch.Generator().manual_seed(seed)
    t = sum(lens)
    n_slots = len(lens) + 2
    slots = torch.randperm(n_slots, generator=gen)[: len(lens)].to(torch.int32)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    state = torch.full((n_slots, hv, dk, dv), float("nan"))
    state[slots.long()] = torch.randn(len(lens), hv, dk, dv, generator=gen) * 0.3
    conv = torch.full((n_slots, c, 3), float("nan"))
    conv[slots.long()] = torch.randn(len(lens), c, 3, generator=gen)
    tensors = dict(
        q=torch.randn(t, hk, dk, generator=gen).bfloat16(), k=torch.randn(t, hk, dk, generator=gen).bfloat16(),
        v=torch.randn(t, hv, dv, generator=gen).bfloat16(), g=-torch.rand(t, hv, generator=gen),
        beta=torch.rand(t, hv, generator=gen), state=state, x=torch.randn(t, c, generator=gen).bfloat16(),
        w=torch.randn(c, 4, generator=gen), conv=conv.bfloat16(), cu=cu, slots=slots,
    )
    return {name: val.to(device) for name, val in tensors.items()}


@pytest.mark.parametrize("lens", [[1], [3, 1, 17], [2, 0, 5]])
def test_prefill_kernels_match_references(lens):
    """Varlen conv1d and recurrent GDN prefill, lengths 0/1/2 (shorter than the conv window) and 17."""
    k = load_kernels()
    d = _varlen(lens, hk=1, hv=2, dk=16, dv=24, c=40, seed=sum(lens))
    conv_ref, state_ref = d["conv"].clone(), d["state"].clone()
    y = k.causal_conv1d_prefill(d["x"], d["conv"], d["w"], d["cu"], d["slots"], block_c=16)
    y_ref = k.ref_prefill.causal_conv1d_prefill_ref(d["x"], conv_ref, d["w"], d["cu"], d["slots"])
    assert rel_err(y, y_ref) < TOL_BF16
    assert torch.equal(d["conv"].isnan(), conv_ref.isnan())
    used = d["slots"].long()
    assert torch.equal(d["conv"][used], conv_ref[used])
    args = [d[n] for n in ("q", "k", "v", "g", "beta")]
    o = k.gdn_recurrent_prefill(*args, d["state"], d["cu"], d["slots"], block_v=16)
    o_ref = k.ref_prefill.gdn_chunk_prefill_ref(*args, state_ref, d["cu"], d["slots"], chunk_size=4)
    assert rel_err(o, o_ref) < TOL_BF16
    assert rel_err(d["state"][used], state_ref[used]) < TOL_FP32
    assert torch.equal(d["state"].isnan(), state_ref.isnan())


@gpu
@needs_cuda
def test_prefill_kernels_real_shapes_cuda():
    k = load_kernels()
    d = _varlen([1, 63, 64, 65, 300], hk=16, hv=32, dk=128, dv=128, c=8192, seed=9, device="cuda")
    conv_ref, state_ref = d["conv"].clone(), d["state"].clone()
    y = k.causal_conv1d_prefill(d["x"], d["conv"], d["w"], d["cu"], d["slots"])
    assert rel_err(y, k.ref_prefill.causal_conv1d_prefill_ref(d["x"], conv_ref, d["w"], d["cu"], d["slots"])) < TOL_BF16
    args = [d[n] for n in ("q", "k", "v", "g", "beta")]
    o = k.gdn_recurrent_prefill(*args, d["state"], d["cu"], d["slots"])
    o_ref = k.ref_prefill.gdn_chunk_prefill_ref(*args, state_ref, d["cu"], d["slots"])
    used = d["slots"].long()
    assert rel_err(o, o_ref) < TOL_BF16
    assert rel_err(d["state"][used], state_ref[used]) < 1e-4  # 300 sequential fp32 updates vs chunked order


@gpu
@needs_cuda
@pytest.mark.parametrize("b", [1, 64])
def test_gdn_decode_real_shapes_cuda(b):
    k = load_kernels()
    q, kk, v, g, beta, state, slots = _gdn_inputs(b, 16, 32, 128, 128, n_slots=b + 8, seed=b, device="cuda")
    state_ref = state.clone()
    o = k.gdn_recurrent_step(q, kk, v, g, beta, state, slots)
    o_ref = k.reference.gdn_recurrent_step_ref(q, kk, v, g, beta, state_ref, slots)
    assert rel_err(o, o_ref) < TOL_BF16
    assert rel_err(state[slots.long()], state_ref[slots.long()]) < TOL_FP32
    x = torch.randn(b, 8192, device="cuda").bfloat16()
    w = torch.randn(8192, 4, device="cuda").bfloat16()
    cs = torch.randn(b + 8, 8192, 3, device="cuda").bfloat16()
    cs_ref = cs.clone()
    y = k.causal_conv1d_update(x, cs, w, slots)
    assert rel_err(y, k.reference.causal_conv1d_update_ref(x, cs_ref, w, slots)) < TOL_BF16
    assert torch.equal(cs, cs_ref)


@gpu
@needs_cuda
@pytest.mark.parametrize("b", [1, 64])
def test_gdn_gated_decode_real_shapes_cuda(b):
    """The decode path as gdn.py runs it: conv1d, gated step and a, b all read in_proj's column slices."""
    k = load_kernels()
    conv_dim, value_dim, hv = 8192, 4096, 32
    proj = torch.randn(b, conv_dim + value_dim + 2 * hv, device="cuda").bfloat16()
    mixed, _, bb, a = proj.split([conv_dim, value_dim, hv, hv], dim=-1)
    _, _, _, _, _, state, slots = _gdn_inputs(b, 16, 32, 128, 128, n_slots=b + 8, seed=b, device="cuda")
    w = torch.randn(conv_dim, 4, device="cuda").bfloat16()
    cs = torch.randn(b + 8, conv_dim, 3, device="cuda").bfloat16()
    cs_ref, state_ref = cs.clone(), state.clone()
    y = k.causal_conv1d_update(mixed, cs, w, slots)
    assert rel_err(y, k.reference.causal_conv1d_update_ref(mixed, cs_ref, w, slots)) < TOL_BF16
    assert torch.equal(cs, cs_ref)
    q, kk, v = (t.reshape(b, -1, 128) for t in y.split([2048, 2048, value_dim], dim=-1))
    a_log = torch.empty(hv, device="cuda").uniform_(0.01, 16).log_()
    dt_bias = torch.randn(hv, device="cuda")
    o = k.gdn_recurrent_step_gated(q, kk, v, a, bb, a_log, dt_bias, state, slots)
    o_ref = k.reference.gdn_recurrent_step_gated_ref(q, kk, v, a, bb, a_log, dt_bias, state_ref, slots)
    assert rel_err(o, o_ref) < TOL_BF16
    assert rel_err(state[slots.long()], state_ref[slots.long()]) < TOL_FP32

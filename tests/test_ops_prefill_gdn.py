"""ops/gdn_chunk.py: the Triton chunked gated delta rule (gates fused) against its torch reference
on odd lengths (1, 63, 64, 65, 0, a 3-chunk one), several sequences of mixed lengths in one varlen
batch continuing from random states (a continued sequence), and against the recurrent Triton step
at split points: prefill the first p tokens by chunks, the rest token by token, and compare with
the whole sequence in one go. NaN-poisoned outputs; state rows outside the slots are NaN and must
stay NaN. Under TRITON_INTERPRET=1 on CPU (tiny heads), compiled on CUDA."""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, TOL_FP32, load_kernels, rel_err  # noqa: I001
from test_ops_prefill_common import cu_of, load_op

import pytest
import torch


def gdn_inputs(lens, hk=2, hv=4, dk=32, dv=24, seed=0, device=DEVICE):
    """Packed q, k, v (bf16; q, k as column views of one [T, 2·HK·Dk + 7] block like the conv output),
    raw gates a, b (bf16 column slices of a wider block, a spanning softplus's regimes), A_log,
    dt_bias fp32, a state with random rows at the slots and NaN elsewhere, cu_seqlens, slots."""
    gen = torch.Generator().manual_seed(seed)
    t, n = sum(lens), len(lens)
    mixed = torch.full((t, 2 * hk * dk + 7), float("nan"))
    mixed[:, : 2 * hk * dk] = torch.randn(t, 2 * hk * dk, generator=gen)
    mixed = mixed.bfloat16()
    q = mixed[:, : hk * dk].view(t, hk, dk)
    k = mixed[:, hk * dk : 2 * hk * dk].view(t, hk, dk)
    v = torch.randn(t, hv, dv, generator=gen).bfloat16()
    wide = torch.full((t, 2 * hv + 3), float("nan"))
    wide[:, 1 : 1 + hv] = torch.randn(t, hv, generator=gen) * 3
    wide[:, 2 + hv : 2 + 2 * hv] = torch.randn(t, hv, generator=gen) * 2
    wide[0, 1] = 25.0  # softplus above its threshold
    wide = wide.bfloat16()
    a, b = wide[:, 1 : 1 + hv], wide[:, 2 + hv : 2 + 2 * hv]
    a_log = torch.rand(hv, generator=gen) * 2 - 1.5
    dt_bias = torch.randn(hv, generator=gen)
    n_slots = n + 2
    slots = torch.randperm(n_slots, generator=gen)[:n].to(torch.int32)
    state = torch.full((n_slots, hv, dk, dv), float("nan"))
    state[slots.long()] = torch.randn(n, hv, dk, dv, generator=gen) * 0.3
    out = dict(q=q, k=k, v=v, a=a, b=b, A_log=a_log, dt_bias=dt_bias, state=state, cu=cu_of(lens, "cpu"), slots=slots)
    return {name: x.to(device) for name, x in out.items()}


def _run(op, d, state, ref=False):
    fn = op.gdn_chunk_prefill_ref if ref else op.gdn_chunk_prefill
    return fn(d["q"], d["k"], d["v"], d["a"], d["b"], d["A_log"], d["dt_bias"], state, d["cu"], d["slots"])


@pytest.mark.parametrize("lens,heads", [([1, 63, 0, 64, 65], (2, 4, 32, 24)), ([150], (1, 2, 16, 32))])
def test_gdn_chunk_matches_reference(lens, heads):
    op = load_op("gdn_chunk")
    hk, hv, dk, dv = heads
    d = gdn_inputs(lens, hk, hv, dk, dv, seed=sum(lens))
    state, state_ref = d["state"].clone(), d["state"].clone()
    o = _run(op, d, state)
    o_ref = _run(op, d, state_ref, ref=True)
    assert rel_err(o, o_ref) < TOL_BF16
    used = d["slots"].long()
    assert rel_err(state[used], state_ref[used]) < TOL_FP32
    assert torch.equal(state.isnan(), state_ref.isnan())  # rows outside the slots untouched (NaN)


@pytest.mark.parametrize("split", [1, 64, 65])
def test_gdn_chunk_agrees_with_recurrent_step_at_split_points(split):
    """70 tokens: chunked prefill of tokens [0, split), then the recurrent gated step kernel for the
    rest, against the chunked prefill of all 70 at once (outputs and final state)."""
    op, kern = load_op("gdn_chunk"), load_kernels()
    n = 70
    d = gdn_inputs([n], 1, 2, 16, 16, seed=split)
    whole = d["state"].clone()
    o_whole = _run(op, d, whole)
    state = d["state"].clone()
    head = {name: (x[:split] if name in ("q", "k", "v", "a", "b") else x) for name, x in d.items()}
    head["cu"] = cu_of([split])
    o_head = _run(op, head, state)
    outs = [o_head]
    for p in range(split, n):
        outs.append(kern.gdn_recurrent_step_gated(d["q"][p : p + 1], d["k"][p : p + 1], d["v"][p : p + 1], d["a"][p : p + 1],
                                                  d["b"][p : p + 1], d["A_log"], d["dt_bias"], state, d["slots"]))
    assert rel_err(torch.cat(outs), o_whole) < TOL_BF16
    used = d["slots"].long()
    assert rel_err(state[used], whole[used]) < TOL_FP32


def test_gdn_chunk_continues_a_sequence():
    """A sequence prefilled as 65 + 64 tokens (state carried in its slot) equals 129 in one go."""
    op = load_op("gdn_chunk")
    d = gdn_inputs([129], 1, 2, 16, 16, seed=3)
    whole = d["state"].clone()
    o_whole = _run(op, d, whole)
    state, outs = d["state"].clone(), []
    for lo, hi in ((0, 65), (65, 129)):
        piece = {name: (x[lo:hi] if name in ("q", "k", "v", "a", "b") else x) for name, x in d.items()}
        piece["cu"] = cu_of([hi - lo])
        outs.append(_run(op, piece, state))
    assert rel_err(torch.cat(outs), o_whole) < TOL_BF16
    assert rel_err(state[d["slots"].long()], whole[d["slots"].long()]) < TOL_FP32


def test_gdn_chunk_checks_name_the_problem():
    op = load_op("gdn_chunk")
    d = gdn_inputs([3], 1, 2, 16, 16, seed=0, device="cpu")
    with pytest.raises(ValueError, match="A_log"):
        op.gdn_chunk_prefill(d["q"], d["k"], d["v"], d["a"], d["b"], d["A_log"].bfloat16(), d["dt_bias"], d["state"],
                             d["cu"], d["slots"])
    with pytest.raises(ValueError, match="slots"):
        op.gdn_chunk_prefill(d["q"], d["k"], d["v"], d["a"], d["b"], d["A_log"], d["dt_bias"], d["state"],
                             d["cu"], d["slots"][:0])

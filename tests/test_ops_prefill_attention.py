"""ops/attention_prefill.py: varlen causal flash attention over the slot KV cache with the sigmoid
gate fused, against its SDPA reference: several sequences of mixed lengths (1, 63, 64, 65) in one
batch, some continuing (earlier keys already in the cache at their slot), GQA, a head_dim that is
not a power of two, a longer sequence; the cache is only read. NaN-poisoned output.

Tolerance: the output is rounded to bf16 three times (attention, sigmoid(gate), the product),
in kernel and reference alike, so two roundings' worth of disagreement (TOL_BF16_TWICE)."""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16_TWICE, rel_err  # noqa: I001
from test_ops_prefill_common import cu_of, load_op

import pytest
import torch


def attn_inputs(lens, starts, nq=4, nkv=2, hd=32, max_len=256, seed=0, device=DEVICE):
    """q [T, nq, hd]; random caches [N+1, max_len, nkv, hd] (rows past a sequence's end random too:
    a kernel reading them shows); gate a strided view of [T, nq, 2·hd]; positions from ``starts``."""
    gen = torch.Generator().manual_seed(seed)
    t, n = sum(lens), len(lens)
    kc = torch.randn(n + 1, max_len, nkv, hd, generator=gen).bfloat16()
    vc = torch.randn(n + 1, max_len, nkv, hd, generator=gen).bfloat16()
    slots = torch.randperm(n + 1, generator=gen)[:n]
    q = torch.randn(t, nq, hd, generator=gen).bfloat16()
    gate = (torch.randn(t, nq, 2 * hd, generator=gen) * 2).bfloat16()[..., hd:]
    positions = torch.cat([torch.arange(s, s + m) for s, m in zip(starts, lens)])
    out = dict(q=q, kc=kc, vc=vc, gate=gate, cu=cu_of(lens, "cpu"), positions=positions, slots=slots)
    return {name: x.to(device) for name, x in out.items()}


@pytest.mark.parametrize(
    "lens,starts,nq,nkv,hd,blocks",
    [
        ([1, 63, 64, 65], [0, 3, 0, 40], 4, 2, 32, (32, 16)),
        ([2, 65], [17, 0], 2, 1, 48, (16, 32)),
        ([150], [70], 2, 2, 16, (64, 32)),
    ],
)
def test_attention_prefill_matches_reference(lens, starts, nq, nkv, hd, blocks):
    op = load_op("attention_prefill")
    d = attn_inputs(lens, starts, nq, nkv, hd, seed=sum(lens) + hd)
    kc0, vc0 = d["kc"].clone(), d["vc"].clone()
    args = (d["q"], d["kc"], d["vc"], d["gate"], d["cu"], d["positions"], d["slots"], hd**-0.5)
    o = op.attention_prefill(*args, block_m=blocks[0], block_n=blocks[1])
    o_ref = op.attention_prefill_ref(*args)
    assert rel_err(o, o_ref) < TOL_BF16_TWICE
    assert torch.equal(d["kc"], kc0) and torch.equal(d["vc"], vc0)


def test_attention_prefill_reference_is_softmax_attention():
    """The reference against a float64 softmax over each query's visible keys, gate applied."""
    op = load_op("attention_prefill")
    d = attn_inputs([3, 5], [4, 0], 2, 1, 16, max_len=16, seed=1, device="cpu")
    o = op.attention_prefill_ref(d["q"], d["kc"], d["vc"], d["gate"], d["cu"], d["positions"], d["slots"], 0.25)
    for t in range(8):
        i = 0 if t < 3 else 1
        slot, p = int(d["slots"][i]), int(d["positions"][t])
        for h in range(2):
            keys, vals = d["kc"][slot, : p + 1, 0].double(), d["vc"][slot, : p + 1, 0].double()
            want = torch.softmax(keys @ d["q"][t, h].double() * 0.25, 0) @ vals * torch.sigmoid(d["gate"][t, h].double())
            assert rel_err(o[t, h], want) < TOL_BF16_TWICE


def test_attention_prefill_checks_name_the_problem():
    op = load_op("attention_prefill")
    d = attn_inputs([3], [0], 2, 1, 16, max_len=8, seed=0, device="cpu")
    with pytest.raises(ValueError, match="gate"):
        op.attention_prefill(d["q"], d["kc"], d["vc"], d["gate"][:, :1], d["cu"], d["positions"], d["slots"], 0.25)
    with pytest.raises(ValueError, match="HQ = 2 a multiple"):
        op.attention_prefill(d["q"], d["kc"].expand(-1, -1, 3, -1).contiguous(), d["vc"].expand(-1, -1, 3, -1).contiguous(),
                             d["gate"], d["cu"], d["positions"], d["slots"], 0.25)

"""ops/conv1d_prefill.py: the parallel causal conv1d (token × channel blocks) against its torch
reference on mixed varlen batches (lengths 0, 1, 2 — shorter than the window —, 63, 64, 65, a
longer one) continuing from random conv states, x a strided column slice with NaN around it,
and chunked: a sequence prefilled in pieces equals the whole (outputs and state, bit for bit)."""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, rel_err  # noqa: I001
from test_ops_prefill_common import cu_of, load_op

import pytest
import torch


def conv_inputs(lens, c=40, width=4, seed=0, device=DEVICE):
    gen = torch.Generator().manual_seed(seed)
    t, n = sum(lens), len(lens)
    wide = torch.full((t, c + 7), float("nan")).bfloat16()
    wide[:, 3 : 3 + c] = torch.randn(t, c, generator=gen).bfloat16()
    weight = torch.randn(c, width, generator=gen)
    slots = torch.randperm(n + 2, generator=gen)[:n].to(torch.int32)
    state = torch.full((n + 2, c, width - 1), float("nan")).bfloat16()
    state[slots.long()] = torch.randn(n, c, width - 1, generator=gen).bfloat16()
    wide, weight, state, slots = (x.to(device) for x in (wide, weight, state, slots))
    return wide[:, 3 : 3 + c], weight, state, cu_of(lens, device), slots


@pytest.mark.parametrize("lens,block_t,block_c", [([1, 2, 0, 63, 64, 65, 3], 16, 32), ([300], 64, 16), ([5, 70], 32, 64)])
def test_conv1d_prefill_matches_reference(lens, block_t, block_c):
    op = load_op("conv1d_prefill")
    x, w, state, cu, slots = conv_inputs(lens, seed=len(lens) + block_t)
    state_ref = state.clone()
    y = op.causal_conv1d_prefill(x, state, w, cu, slots, block_t=block_t, block_c=block_c)
    y_ref = op.causal_conv1d_prefill_ref(x, state_ref, w, cu, slots)
    assert rel_err(y, y_ref) < TOL_BF16
    assert torch.equal(state.isnan(), state_ref.isnan())  # rows outside the slots untouched
    assert torch.equal(state[slots.long()], state_ref[slots.long()])


def test_conv1d_prefill_in_pieces_equals_whole():
    op = load_op("conv1d_prefill")
    x, w, state, cu, slots = conv_inputs([130], seed=4)
    whole = state.clone()
    y_whole = op.causal_conv1d_prefill(x, whole, w, cu, slots, block_t=32)
    ys = []
    for lo, hi in ((0, 1), (1, 64), (64, 66), (66, 130)):
        ys.append(op.causal_conv1d_prefill(x[lo:hi], state, w, cu_of([hi - lo], x.device), slots, block_t=32))
    assert torch.equal(torch.cat(ys), y_whole)
    assert torch.equal(state.isnan(), whole.isnan())
    assert torch.equal(state[slots.long()], whole[slots.long()])

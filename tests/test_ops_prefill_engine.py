"""The prefill ops wired into the engine: the tiny bf16 engine on CPU with only ops/gdn_chunk,
ops/attention_prefill and ops/conv1d_prefill running their Triton kernels (interpreter), every
other op its reference, against the same engine all on references. Covers what the op tests
cannot: the engine's strided views (q, k, v of the conv output, a, b, z of in_proj, the gate of
the q projection), positions and slots from a real Batch, a batch of two new sequences, their
continuation by a second prefill (state and KV already in the slots) and a decode step after.
Compared as the engine tests compare rounding-only differences (test_engine_support)."""

from __future__ import annotations

from test_kernels_common import DEVICE  # noqa: F401,I001  (sets TRITON_INTERPRET=1 on CPU first)

import importlib

import pytest
import torch
from test_engine_support import LAYER1_TOL, assert_logits_close, prompt, rel_rows, render_tiny

OPS = {"gdn_chunk", "attention_prefill", "conv1d_prefill"}


class _AllBut(set):
    """``REFERENCE_OPS`` that names every op but ``OPS``."""

    def __contains__(self, op: object) -> bool:
        return op not in OPS


@pytest.fixture(scope="module")
def engine_mod(tmp_path_factory):
    return render_tiny("bf16", tmp_path_factory.mktemp("ops-engine"))


def _run(mod, ckpt, ops: bool):
    kern = importlib.import_module(f"{mod.__name__}.kernels")
    common = importlib.import_module(f"{mod.__name__}.kernels._common")
    saved = kern.BACKEND, kern.REFERENCE_OPS, common.POISON_ALLOCATIONS
    kern.BACKEND, kern.REFERENCE_OPS, common.POISON_ALLOCATIONS = ("triton", _AllBut(), True) if ops else ("reference", set(), False)
    try:
        engine = mod.load(str(ckpt), device="cpu", max_batch=3, max_seq_len=128)
        first = engine.prefill([prompt(1, 1), prompt(65, 2)], return_hidden=True)
        more = engine.prefill([prompt(6, 3), prompt(3, 4)], slots=first.slots, return_hidden=True)
        step = engine.decode(first.slots, [5, 7])
    finally:
        kern.BACKEND, kern.REFERENCE_OPS, common.POISON_ALLOCATIONS = saved
    return first, more, step


@pytest.mark.slow
def test_engine_prefill_with_triton_ops_matches_references(engine_mod, tiny_checkpoint):
    ckpt = tiny_checkpoint("bf16")
    got, want = _run(engine_mod, ckpt, ops=True), _run(engine_mod, ckpt, ops=False)
    assert not torch.equal(got[0].hidden[1], want[0].hidden[1]), "the Triton ops did not run (bit-equal to the references)"
    for res_got, res_want, what in ((got[0], want[0], "new sequences"), (got[1], want[1], "continued sequences")):
        for i, (hg, hw) in enumerate(zip(res_got.hidden, res_want.hidden)):
            err = rel_rows(hg[1], hw[1])  # layer 0 (GDN) output, before noise is amplified
            assert err.max() <= LAYER1_TOL, f"{what} {i}: first layer error {err.max():.3g}"
            assert_logits_close(res_got.logits[i], res_want.logits[i], f"{what} {i}")
    assert_logits_close(got[2], want[2], "decode after the prefills")
    attn_layer = 3  # the first full-attention layer's output, sequence 2 (65 tokens)
    assert rel_rows(got[0].hidden[1][attn_layer + 1], want[0].hidden[1][attn_layer + 1]).median() <= LAYER1_TOL

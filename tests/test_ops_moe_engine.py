"""The tiny NVFP4 engine on CPU with ``moe_ops = 1`` (experts repacked at load, ``ops.moe_fused`` in the
MoE block; its reference on CPU) against the same engine with the old path, including the static padded
decode batches of the CUDA-graph path (padding rows reach the MoE as n_valid and touch no expert)."""

from __future__ import annotations

import dataclasses
import importlib

import pytest
import torch

from test_engine_support import assert_logits_close, prompt, render_tiny


@pytest.fixture(scope="module")
def engine_mod(tmp_path_factory):
    return render_tiny("nvfp4", tmp_path_factory.mktemp("gen"))


def test_moe_ops_engine_matches_old_path_with_padding(engine_mod, tiny_checkpoint):
    mod = engine_mod
    old = mod.load(tiny_checkpoint("nvfp4"), "cpu", max_batch=4, max_seq_len=256)
    assert old.tunables.moe_ops == 0  # CPU renders keep the old path
    fresh = mod.load(tiny_checkpoint("nvfp4"), "cpu", max_batch=4, max_seq_len=256)
    cache = importlib.import_module(f"{mod.__name__}.cache")
    tun = dataclasses.replace(fresh.tunables, moe_ops=1, cuda_graph_max_batch=4, attention_decode_splits=8)
    new = mod.Engine(fresh.model.w, fresh.dims, tun, fresh.device, cache.CacheConfig(4, 256))
    for layer in new.model.w.layers:  # repacked in place, the checkpoint layout freed
        ex = layer.moe.experts
        assert ex.packed is not None and ex.w13 is None and ex.s2 is None
        assert layer.moe.shared_stacked and ex.packed.num_experts == new.dims.num_experts + 1
    assert new.graphs is not None and new.graphs.sizes == [1, 2, 4]
    prompts = [prompt(n, 60 + n) for n in (9, 30, 17)]
    steps = [prompt(3, 70 + i) for i in range(4)]

    def run(e):
        r = e.prefill(prompts)
        rows = [torch.stack([lg[-1] for lg in r.logits])] + [e.decode(r.slots, toks) for toks in steps]
        e.release(r.slots)
        return torch.stack(rows, 1)  # [3, 1 + steps, V]

    want, got = run(old), run(new)  # 3 live rows in the padded batch of 4
    for i in range(3):
        assert_logits_close(got[i], want[i], f"moe_ops=1, sequence {i}")
    assert new.cache.lengths[new.cache.scratch_slot] == 0

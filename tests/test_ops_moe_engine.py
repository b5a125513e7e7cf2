"""The tiny NVFP4 engine on CPU with ``moe_ops = 1`` (experts repacked at load, ``ops.moe_fused`` in the
MoE block; its reference on CPU) against the same engine with the old path, including the static padded
decode batches of the CUDA-graph path (padding rows reach the MoE as n_valid and touch no expert), and
the dispatch by token count (``moe_ops_min_tokens``: small T on ``kernels.moe_nvfp4``, both layouts kept)."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest
import torch

from test_engine_support import assert_logits_close, prompt, render_tiny


@pytest.fixture(scope="module")
def engine_mod(tmp_path_factory):
    return render_tiny("nvfp4", tmp_path_factory.mktemp("gen"))


def _engine(mod, ckpt, **values):
    """A fresh CPU engine of the tiny checkpoint with tunables ``values`` (static padded decode batches 1, 2, 4)."""
    fresh = mod.load(ckpt, "cpu", max_batch=4, max_seq_len=256)
    cache = importlib.import_module(f"{mod.__name__}.cache")
    tun = dataclasses.replace(fresh.tunables, cuda_graph_max_batch=4, attention_decode_splits=8, **values)
    return mod.Engine(fresh.model.w, fresh.dims, tun, fresh.device, cache.CacheConfig(4, 256))


def test_moe_ops_engine_matches_old_path_with_padding(engine_mod, tiny_checkpoint):
    mod = engine_mod
    old = mod.load(tiny_checkpoint("nvfp4"), "cpu", max_batch=4, max_seq_len=256)
    assert old.tunables.moe_ops == 0  # CPU renders keep the old path
    new = _engine(mod, tiny_checkpoint("nvfp4"), moe_ops=1, moe_ops_min_tokens=1)
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


def test_dispatch_by_token_count_keeps_both_layouts(engine_mod, tiny_checkpoint):
    """moe_ops 1 with moe_ops_min_tokens 8: both layouts stay loaded; a forward of T < 8 tokens runs the
    checkpoint-layout path and T ≥ 8 the packed one. Which one ran is read from the output: the packed
    experts are swapped for the checkpoint's experts rolled by one, so the two paths give different results."""
    mod = engine_mod
    eng = _engine(mod, tiny_checkpoint("nvfp4"), moe_ops=1, moe_ops_min_tokens=8)
    moe = importlib.import_module(f"{mod.__name__}.moe")
    pack = importlib.import_module(f"{mod.__name__}.ops.moe_pack")
    layer = eng.model.w.layers[1].moe
    ex = layer.experts
    assert ex.packed is not None and ex.w13 is not None and ex.s13 is not None and ex.s2 is not None
    rolled = pack.pack_experts(*(t.roll(1, 0) for t in (ex.w13, ex.s13, ex.g13, ex.w2, ex.s2, ex.g2)))
    swapped = dataclasses.replace(layer, experts=dataclasses.replace(ex, packed=rolled))
    old_only = dataclasses.replace(layer, experts=dataclasses.replace(ex, packed=None))
    new_only = dataclasses.replace(layer, experts=dataclasses.replace(ex, w13=None, s13=None, w2=None, s2=None, packed=rolled))
    x = (torch.randn(12, eng.dims.hidden_size, generator=torch.Generator().manual_seed(5)) * 2).bfloat16()
    launch = eng.model.launch
    for t, path in ((1, "nvfp4"), (7, "nvfp4"), (8, "ops"), (12, "ops")):
        assert moe.moe_path(t, swapped.experts, 8) == path
        got = moe.moe_forward(x[:t], swapped, eng.dims, launch, None, 8)
        want = moe.moe_forward(x[:t], old_only if path == "nvfp4" else new_only, eng.dims, launch, None, 8)
        other = moe.moe_forward(x[:t], new_only if path == "nvfp4" else old_only, eng.dims, launch, None, 8)
        assert torch.isfinite(got).all() and got.float().abs().max() > 0
        assert torch.equal(got, want), f"T = {t}: not the {path} path"
        assert (got.float() - other.float()).abs().max() > 1e-2, f"T = {t}: the two paths agree, the test cannot tell them apart"
    assert moe.moe_path(1, new_only.experts, 8) == "ops"  # checkpoint layout freed: the packed path at every T


def test_both_paths_in_one_engine_same_greedy_tokens(engine_mod, tiny_checkpoint):
    """moe_ops 1, moe_ops_min_tokens 4: prefill (T ≥ 4) and the padded decode batch of 4 run the packed path,
    decode batches of 2 and 1 (sequences finishing at different lengths) the old one; greedy tokens
    match the same engine with moe_ops 0 (same decode path: against the eager SDPA decode of a plain
    ``load`` the greedy tokens of this random tiny model drift apart at a near-tie, moe_ops 0 alike)."""
    mod = engine_mod
    old = _engine(mod, tiny_checkpoint("nvfp4"), moe_ops=0)
    both = _engine(mod, tiny_checkpoint("nvfp4"), moe_ops=1, moe_ops_min_tokens=4)
    moe = importlib.import_module(f"{mod.__name__}.moe")
    ex = both.model.w.layers[0].moe.experts
    assert [moe.moe_path(b, ex, 4) for b in both.graphs.sizes] == ["nvfp4", "nvfp4", "ops"]
    prompts = [prompt(n, 80 + n) for n in (11, 26, 5)]
    params = [mod.SamplingParams(max_tokens=n, ignore_eos=True) for n in (9, 5, 3)]
    want, got = old.generate(prompts, params), both.generate(prompts, params)
    assert [len(o) for o in got] == [9, 5, 3]
    assert got == want


def test_moe_ops_min_tokens_validates(engine_mod, tmp_path):
    tunables = importlib.import_module(f"{engine_mod.__name__}.tunables")
    data = json.loads(tunables.PATH.read_text())
    assert data["values"]["moe_ops_min_tokens"] == 16 and tunables.load_tunables(tunables.PATH).moe_ops_min_tokens == 16
    for bad, msg in ((0, "must be a positive int"), (3, "is not one of its choices"), (None, "must be a positive int")):
        data["values"]["moe_ops_min_tokens"] = bad
        path = tmp_path / "tunables.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=f"moe_ops_min_tokens={bad!r} {msg}" if bad is not None else msg):
            tunables.load_tunables(path)


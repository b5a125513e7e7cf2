"""Paged KV (tunable ``kv_block_size``) on the tiny engine on CPU: the same logits as the static
per-slot cache, bit for bit, with sequences whose blocks interleave in the pool, through every
attention path (prefill op and SDPA prefill; SDPA and split-K decode); blocks freed on release;
a full pool refused with a clear error and nothing changed; the scheduler admitting by free blocks.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from test_engine_support import prompt, render_tiny

BS = 16


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return render_tiny("bf16", tmp_path_factory.mktemp("gen"))


@pytest.fixture(scope="module")
def engines(mod, tiny_checkpoint):
    ck = tiny_checkpoint("bf16")
    return {
        "static": mod.load(ck, "cpu", max_batch=3, max_seq_len=160, kv_block_size=0),
        "paged": mod.load(ck, "cpu", max_batch=3, max_seq_len=160, kv_block_size=BS),
        "small": mod.load(ck, "cpu", max_batch=3, max_seq_len=160, kv_block_size=BS, kv_num_blocks=7),  # 6 usable
    }


def test_rendered_cpu_default_is_paged(engines, mod, tiny_checkpoint):
    """The CPU render defaults to paged blocks of 16 (so every CPU engine test runs the paged path)."""
    default = mod.load(tiny_checkpoint("bf16"), "cpu", max_batch=1, max_seq_len=40).cache.kv
    assert default.paged and default.block_size == BS and default.num_blocks == 3 + 1
    kv = engines["paged"].cache.kv
    assert kv.paged and kv.block_size == BS and kv.num_blocks == 3 * 10 + 1
    assert tuple(kv.k[0].shape[:2]) == (31, BS) and tuple(kv.block_table.shape) == (4, 10)
    st = engines["static"].cache.kv
    assert not st.paged and tuple(st.k[0].shape[:2]) == (4, 160)


def _script(eng):
    """Two sequences prefilled in interleaved chunks (their blocks alternate in the pool), a third
    started later, then decode steps across block edges; returns every logits tensor produced."""
    a, b, c = prompt(37, seed=1), prompt(50, seed=2), prompt(5, seed=3)
    out = []
    r = eng.prefill([a[:20], b[:9]])
    sa, sb = r.slots
    out += r.logits
    r2 = eng.prefill([b[9:], a[20:]], [sb, sa])  # continuations: their earlier KV already in the pool
    out += r2.logits
    rc = eng.prefill([c])
    sc = rc.slots[0]
    out += rc.logits
    toks = [int(lg[-1].argmax()) for lg in (r2.logits[1], r2.logits[0], rc.logits[0])]
    for _ in range(14):  # a: 37 -> 51, b: 50 -> 64, c: 5 -> 19 (each crosses a block edge)
        lg = eng.decode([sa, sb, sc], toks)
        out.append(lg)
        toks = [int(x) for x in lg.argmax(-1)]
    eng.release([sa, sb, sc])
    return out


@pytest.mark.parametrize("splits,prefill_ops", [(0, 1), (4, 0)])
def test_paged_logits_equal_static(engines, splits, prefill_ops):
    results = {}
    for name in ("static", "paged"):
        eng = engines[name]
        keep = eng.model.tunables
        eng.model.tunables = dataclasses.replace(keep, attention_decode_splits=splits, attention_prefill_ops=prefill_ops)
        try:
            if name == "paged":  # fragment the pool first: a released sequence leaves holes
                r = eng.prefill([prompt(40, seed=9)])
                eng.release(r.slots)
            results[name] = _script(eng)
        finally:
            eng.model.tunables = keep
    for i, (p, s) in enumerate(zip(results["paged"], results["static"])):
        assert torch.isfinite(s).all() and s.std() > 0
        assert torch.equal(p, s), f"logits {i} differ: max {float((p - s).abs().max()):.3g}"
    kv = engines["paged"].cache.kv
    assert kv.free_blocks == kv.num_blocks - 1 and int(kv.block_table.abs().sum()) == 0  # all returned


def test_sequence_blocks_are_not_contiguous(engines):
    eng = engines["paged"]
    r = eng.prefill([prompt(20, seed=4), prompt(20, seed=5)])
    r2 = eng.prefill([prompt(20, seed=6), prompt(20, seed=7)], r.slots)
    assert r2.logits[0].shape[0] == 20
    t = eng.cache.block_table
    a, b = t[r.slots[0], :4].tolist(), t[r.slots[1], :4].tolist()
    assert a[3] == 0 and b[3] == 0 and 0 not in {*a[:3], *b[:3]}  # 40 tokens: 3 blocks, the fourth unowned
    assert len({*a[:3], *b[:3]}) == 6 and a[:3] != sorted(range(a[0], a[0] + 3))  # interleaved in the pool
    eng.release(r.slots)


def test_full_pool_raises_and_changes_nothing(engines):
    eng = engines["small"]
    kv = eng.cache.kv
    with pytest.raises(ValueError, match="KV block pool is full"):
        eng.prefill([prompt(97, seed=1)])  # 7 blocks of 16 > 6
    assert kv.free_blocks == 6 and eng.cache.free_slots == 3
    r = eng.prefill([prompt(64, seed=1), prompt(30, seed=2)])  # 4 + 2 blocks: the pool is full
    assert kv.free_blocks == 0
    sa, sb = r.slots
    eng.decode([sb], [1])  # 31 tokens: still in its second block
    with pytest.raises(ValueError, match="KV block pool is full"):
        eng.decode([sa, sb], [1, 1])  # a needs a fifth block
    assert eng.cache.lengths[sa] == 64 and eng.cache.lengths[sb] == 31
    eng.release([sb])
    assert kv.free_blocks == 2
    assert eng.decode([sa], [1]).shape[0] == 1
    eng.release([sa])
    assert kv.free_blocks == 6


def test_scheduler_admits_by_free_blocks(engines, mod):
    """Three requests of 4 blocks each on a 6-block pool: they take turns, and the outputs equal the
    static engine's (greedy); a request bigger than the pool is refused up front."""
    prompts = [prompt(40, seed=s) for s in (1, 2, 3)]
    params = mod.SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)  # 51 tokens: 4 blocks
    got = engines["small"].generate(prompts, params)
    want = engines["static"].generate(prompts, params)
    assert got == want and all(len(g) == 12 for g in got)
    sched = mod.Scheduler(engines["small"])
    for i, p in enumerate(prompts):
        sched.add_request(i, p, params)
    sched.step()
    assert sched.num_running == 1 and sched.num_waiting == 2  # slots free, blocks not
    sched.abort_all()
    while sched.has_unfinished():
        sched.step()
    with pytest.raises(ValueError, match="more than the whole pool"):
        sched.add_request("big", prompt(90, seed=1), dataclasses.replace(params, max_tokens=20))
    assert engines["small"].cache.kv.free_blocks == 6

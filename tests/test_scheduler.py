"""The engine's step API (``scheduler.Scheduler``) on CPU, tiny bf16 model: requests arriving and
aborting at random steps give every sequence exactly the tokens of the same request run alone;
admission waits for slots; stop ids, seeds, logprobs; bad requests are refused."""

from __future__ import annotations

import dataclasses
import importlib
import random

import pytest
import torch

from test_engine_support import prompt, render_tiny


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return render_tiny("bf16", tmp_path_factory.mktemp("sched"))


@pytest.fixture(scope="module")
def eng(mod, tiny_checkpoint):
    """4 slots, 16-token prefill pieces, 3 sequences per decode step; the split-K decode attention
    reference (batch-invariant on CPU: each sequence reduced alone, no padding to the longest)."""
    base = mod.load(tiny_checkpoint("bf16"), "cpu", max_batch=4, max_seq_len=96)
    cache = importlib.import_module(f"{mod.__name__}.cache")
    tun = dataclasses.replace(base.tunables, attention_decode_splits=8, prefill_chunk_tokens=16, max_decode_batch=3)
    return mod.Engine(base.model.w, base.dims, tun, base.device, cache.CacheConfig(4, 96))


@pytest.fixture(scope="module")
def sched_mod(mod):
    return importlib.import_module(f"{mod.__name__}.scheduler")


def _alone(sched_mod, eng, p, sp) -> list[int]:
    s = sched_mod.Scheduler(eng)
    s.add_request("x", p, sp)
    out: list[int] = []
    while s.has_unfinished():
        for o in s.step():
            out += o.new_tokens
    return out


def test_arrivals_and_aborts_at_random_steps_do_not_change_any_sequence(mod, eng, sched_mod):
    rng = random.Random(5)
    reqs = []
    for i in range(10):
        sp = mod.SamplingParams(max_tokens=9 if i in (2, 6, 9) else rng.randint(1, 9), ignore_eos=True)
        if i in (3, 7):  # seeded sampling: its own generator, whatever the neighbours
            sp = dataclasses.replace(sp, temperature=0.8, top_k=50, top_p=0.9, seed=100 + i)
        reqs.append((i, prompt(rng.randint(1, 40), 50 + i), sp))
    alone = {i: _alone(sched_mod, eng, p, sp) for i, p, sp in reqs}
    assert len({tuple(v) for v in alone.values()}) == len(alone), "distinct requests must give distinct outputs"

    arrive = {i: rng.randint(0, 12) for i, _, _ in reqs}
    abort_at = {2: arrive[2], 6: arrive[6] + 3, 9: arrive[9] + 5}  # queued, prefilling or decoding
    s = sched_mod.Scheduler(eng)
    got: dict[int, list[int]] = {i: [] for i, _, _ in reqs}
    reasons: dict[int, str] = {}
    queued_seen = mixed_seen = False
    step = 0
    while step <= max(abort_at.values()) or s.has_unfinished():
        for i, p, sp in reqs:
            if arrive[i] == step:
                s.add_request(i, p, sp)
        for i, at in abort_at.items():
            if at == step:
                assert s.abort(i) is (i not in reasons), "a live request aborts, a finished one cannot"
        queued_seen |= s.num_waiting > 0
        mixed_seen |= bool(s.prefilling) and bool(s.running)
        for o in s.step():
            got[o.request_id] += o.new_tokens
            if o.finished:
                reasons[o.request_id] = o.finish_reason
            assert o.output_tokens == len(got[o.request_id])
        step += 1
        assert step < 200
    assert queued_seen and mixed_seen, "the schedule must exercise queueing and prefill beside decode"
    assert eng.cache.free_slots == eng.max_batch
    for i, p, sp in reqs:
        if reasons[i] == "abort":
            assert got[i] == alone[i][: len(got[i])], f"aborted request {i} diverged before its abort"
        else:
            assert got[i] == alone[i], f"request {i} differs from the same request run alone"
            assert reasons[i] == "length" and len(got[i]) == sp.max_tokens
    aborted = [i for i in abort_at if reasons[i] == "abort"]
    assert len(aborted) >= 2 and got[2] == [] and any(0 < len(got[i]) < 9 for i in aborted), (aborted, got)


def test_stop_ids_end_a_sequence_and_eos_unless_ignored(mod, eng, sched_mod):
    p = prompt(12, 3)
    full = _alone(sched_mod, eng, p, mod.SamplingParams(max_tokens=10, ignore_eos=True))
    stop = full[4]
    cut = full[: full.index(stop) + 1]
    assert _alone(sched_mod, eng, p, mod.SamplingParams(max_tokens=10, ignore_eos=True, stop_token_ids=(stop,))) == cut
    early = mod.Engine(eng.model.w, dataclasses.replace(eng.dims, eos_token_id=stop), eng.tunables, eng.device,
                       importlib.import_module(f"{mod.__name__}.cache").CacheConfig(2, 96))
    assert _alone(sched_mod, early, p, mod.SamplingParams(max_tokens=10)) == cut
    assert _alone(sched_mod, early, p, mod.SamplingParams(max_tokens=10, ignore_eos=True)) == full


def test_logprobs_are_those_of_the_model(mod, eng, sched_mod):
    p = prompt(9, 4)
    s = sched_mod.Scheduler(eng)
    s.add_request("a", p, mod.SamplingParams(max_tokens=2, ignore_eos=True, logprobs=3))
    outs = [o for _ in range(3) for o in s.step()]
    first = outs[0].logprobs[0]
    r = eng.prefill([p])
    eng.release(r.slots)
    want = torch.log_softmax(r.logits[0][-1], -1)
    assert first.token == int(want.argmax()) == first.top[0][0]
    assert abs(first.logprob - float(want.max())) < 1e-3 and first.logprob < 0
    assert [t for t, _ in first.top] == torch.topk(want, 3).indices.tolist()
    assert outs[1].finished and outs[1].finish_reason == "length"


def test_bad_requests_are_refused_and_queue_nothing(mod, eng, sched_mod):
    s = sched_mod.Scheduler(eng)
    sp = mod.SamplingParams(max_tokens=4)
    with pytest.raises(ValueError, match="empty"):
        s.add_request("e", [], sp)
    with pytest.raises(ValueError, match="max_seq_len=96"):
        s.add_request("long", prompt(90, 1), mod.SamplingParams(max_tokens=10))
    with pytest.raises(ValueError, match=r"outside \[0, 1024\)"):
        s.add_request("v", [5, 5000], sp)
    s.add_request("ok", [1, 2, 3], sp)
    with pytest.raises(ValueError, match="already live"):
        s.add_request("ok", [1, 2], sp)
    assert s.num_waiting == 1 and not s.abort("nope")
    s.abort_all()
    assert [o.finish_reason for o in s.step()] == ["abort"] and not s.has_unfinished()
    assert eng.cache.free_slots == eng.max_batch


def test_warmup_runs_every_shape_class_once_and_leaves_nothing_behind(mod, eng, sched_mod):
    wu = importlib.import_module(f"{mod.__name__}.warmup")
    assert wu.classes(64) == [1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64]
    assert wu.classes(20) == [1, 2, 3, 4, 5, 8, 9, 16, 17, 20]
    for n, t in wu.shapes(4, 16):
        assert n <= t and sum(wu.split(t, n)) == t and max(wu.split(t, n)) - min(wu.split(t, n)) <= 1
    sp = mod.SamplingParams(max_tokens=6, ignore_eos=True)
    p = prompt(21, 3)
    before = _alone(sched_mod, eng, p, sp)
    rep = eng.warmup()  # 4 slots, 16-token pieces; no CUDA graphs on CPU: every N decodes eagerly once
    assert (rep.prefills, rep.continued, rep.decodes) == (len(wu.shapes(4, 16)),) * 2 + (4,) and rep.prefills >= 20
    assert eng.cache.free_slots == 4
    assert _alone(sched_mod, eng, p, sp) == before, "warm-up left state behind"
    s = sched_mod.Scheduler(eng)
    s.add_request("live", p, sp)
    s.step()
    with pytest.raises(ValueError, match="live"):
        eng.warmup()
    s.abort_all()
    s.step()
    assert eng.cache.free_slots == 4

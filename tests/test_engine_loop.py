"""The server's engine thread (``metainfer.serve.engine_loop.EngineLoop``) over the tiny bf16 engine
on CPU: every output reaches its sink, in order and complete, each step's outputs are posted while
the engine is still stepping (once the next forward is queued), and the last step's at once."""

from __future__ import annotations

import threading
import time

import pytest

from metainfer.serve.engine_loop import EngineLoop
from metainfer.serve.metrics import Metrics
from test_engine_support import prompt, render_tiny


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return render_tiny("bf16", tmp_path_factory.mktemp("loop"))


def test_outputs_arrive_complete_in_order_and_while_the_engine_steps(mod, tiny_checkpoint):
    eng = mod.load(tiny_checkpoint("bf16"), "cpu", max_batch=4, max_seq_len=96)
    sched = mod.Scheduler(eng)
    loop = EngineLoop(sched, Metrics(4), 4, 96)
    got: dict[str, list] = {"a": [], "b": [], "c": []}
    posted_at: list[int] = []  # loop.steps when each post happened
    done = threading.Event()

    def post(pairs):
        posted_at.append(loop.steps)
        for sink, item in pairs:
            sink(item)

    def sink_for(name):
        def sink(item):
            got[name].append(item)
            if all(v and v[-1].finished for v in got.values()):
                done.set()
        return sink

    loop.post = post
    want = {}
    for name, n, seed in (("a", 12, 1), ("b", 7, 2), ("c", 17, 3)):
        p, sp = prompt(9 + seed, seed), mod.SamplingParams(max_tokens=n, ignore_eos=True)
        want[name] = eng.generate([p], sp)[0]
        loop.submit(name, p, sp, sink_for(name))
    loop.start()
    try:
        assert done.wait(120), f"not every request finished: {({k: len(v) for k, v in got.items()})}"
    finally:
        loop.stop()
    for name, outs in got.items():
        assert [t for o in outs for t in o.new_tokens] == want[name], name
        assert [o.finished for o in outs] == [False] * (len(outs) - 1) + [True]
    steps = loop.steps
    assert steps >= 17 and len(set(posted_at)) >= steps - 2, "outputs were held back instead of posted step by step"
    assert max(posted_at) == steps, "the last step's outputs must be posted at once"
    time.sleep(0.1)
    assert not loop._pending

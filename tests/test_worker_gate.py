"""Engines in worker processes: the wire format, limits (timeout, crash), isolation, tampering, the full bench-output
check, the judge's clock, and that the judge never imports engine code."""

from __future__ import annotations

import ast
import math
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from cheats import append, render_tiny
from harness import worker_isolation, worker_protocol
from harness.gate import GateArgs, run_gate
from harness.worker import EngineError, Worker, WorkerFailure, WorkerLimits

REPO = Path(__file__).resolve().parents[1]
FAST = WorkerLimits(start_s=120, load_s=120, call_s=120, static_s=120, stage_s=900)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_tiny(tmp_path_factory.mktemp("worker-render"))


def variant(rendered: Path, tmp_path: Path, code: str, name: str = "variant") -> Path:
    dest = tmp_path / name / rendered.name
    shutil.copytree(rendered, dest)
    append(dest, "engine/__init__.py", code)
    return dest


def gate(engine: Path, checkpoint: Path, tmp_path: Path, stages: tuple[str, ...], baseline: Path | None = None,
         limits: WorkerLimits = FAST, isolation: str | None = None, workloads=("conc32",)):
    args = GateArgs(engine, checkpoint, baseline, "cpu", stages, 11, 1, "cpu", workloads, tmp_path / "gate.json",
                    parity_lengths=(1, 17), parity_steps=2, isolation=isolation, limits=limits)
    return run_gate(args)


# --- the wire format --------------------------------------------------------------------------

def test_protocol_round_trip_and_garbage():
    r, w = os.pipe()
    msg = {"a": [1, 2.5, float("nan"), None, True], "t": torch.arange(6, dtype=torch.float32).reshape(2, 3),
           "b": torch.tensor([1.0, -2.0], dtype=torch.bfloat16), "e": torch.empty(0, 4)}
    worker_protocol.send(w, msg)
    got = worker_protocol.recv(r)
    assert got["a"][:2] == [1, 2.5] and math.isnan(got["a"][2]) and got["a"][3:] == [None, True]
    assert torch.equal(got["t"], msg["t"]) and got["b"].dtype == torch.bfloat16 and got["b"].tolist() == [1.0, -2.0]
    assert got["e"].shape == (0, 4)
    with pytest.raises(TypeError, match="plain data"):
        worker_protocol.encode({"x": object()})
    os.write(w, worker_protocol._HEAD.pack(10, 0) + b"not json!!")
    with pytest.raises(worker_protocol.ProtocolError, match="not JSON"):
        worker_protocol.recv(r)
    body = b'{"__tensor__": 0, "dtype": "float32", "shape": [4]}'
    os.write(w, worker_protocol._HEAD.pack(len(body), 1) + body + worker_protocol._LEN.pack(3) + b"abc")
    with pytest.raises(worker_protocol.ProtocolError, match="needs 16 bytes"):
        worker_protocol.recv(r)
    with pytest.raises(TimeoutError):
        worker_protocol.recv(r, time.monotonic() + 0.2)
    os.close(w)
    with pytest.raises(EOFError):
        worker_protocol.recv(r)
    os.close(r)


# --- limits -------------------------------------------------------------------------------------

def test_a_sleeping_load_is_killed_at_its_limit(rendered, tiny_checkpoint, tmp_path):
    engine = variant(rendered, tmp_path, "import time as _t\n_l = load\ndef load(*a, **k):\n    _t.sleep(10_000)\n")
    with Worker("engine", engine_dir=engine) as w:
        w.ready()
        t0 = time.monotonic()
        with pytest.raises(WorkerFailure) as info:
            w.call("engine.load", timeout=3, engine_dir=str(w.engine_dir), checkpoint=str(tiny_checkpoint("bf16")),
                   device="cpu", max_batch=2, max_seq_len=32)
        assert info.value.verdict == "timeout" and "ran past its limit of 3 s" in str(info.value)
        assert time.monotonic() - t0 < 30 and w.proc is None  # killed and reaped
        root = w.root
    assert not root.exists()  # the private copy is gone


def test_a_gil_hogging_generate_is_killed_and_the_gate_completes(rendered, tiny_checkpoint, tmp_path):
    engine = variant(rendered, tmp_path, '''
_hog_load = load


def load(*a, **k):
    eng = _hog_load(*a, **k)

    def generate(prompts, params):
        while True:
            pass

    eng.generate = generate
    return eng
''')
    t0 = time.monotonic()
    res = gate(engine, tiny_checkpoint("bf16"), tmp_path, ("bench",), limits=WorkerLimits(120, 120, 8, 120, 600))
    assert res.complete and not res.ok and time.monotonic() - t0 < 400
    st = res.stages[-1]
    assert (st.name, st.verdict) == ("bench", "timeout") and "engine.generate" in st.error, st
    assert (tmp_path / "gate.json").is_file()


def test_a_worker_that_exits_is_crashed_with_its_last_output(rendered, tiny_checkpoint, tmp_path):
    engine = variant(rendered, tmp_path, '''
import os as _os
import sys as _sys


def load(*a, **k):
    print("engine: giving up now", file=_sys.stderr, flush=True)
    _os._exit(3)
''')
    with Worker("engine", engine_dir=engine) as w:
        with pytest.raises(WorkerFailure) as info:
            w.call("engine.load", timeout=60, engine_dir=str(w.engine_dir), checkpoint=str(tiny_checkpoint("bf16")),
                   device="cpu", max_batch=2, max_seq_len=32)
    assert info.value.verdict == "crashed" and "exit status 3" in info.value.message
    assert "engine: giving up now" in info.value.stderr_tail


def test_an_engine_exception_is_reported_and_the_worker_lives_on(rendered, tmp_path):
    engine = variant(rendered, tmp_path, "def load(*a, **k):\n    raise ValueError('no such device: tpu')\n")
    with Worker("engine", engine_dir=engine) as w:
        with pytest.raises(EngineError, match="ValueError: no such device: tpu"):
            w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint="/nonexistent", device="tpu", max_batch=1, max_seq_len=8)
        with pytest.raises(EngineError, match="unknown worker op"):
            w.call("steal.verdict")


# --- isolation and tampering ------------------------------------------------------------------

PROBE = '''
import os as _os


def load(checkpoint, *a, **k):
    seen = []
    for target in (%r, _os.path.join(str(checkpoint), "extra.bin")):
        try:
            with open(target, "w") as f:
                f.write("x")
            seen.append("wrote " + target)
        except OSError as err:
            seen.append("refused " + type(err).__name__)
    raise RuntimeError("probe: " + " | ".join(seen) + " | pids " + ",".join(sorted(p for p in _os.listdir("/proc") if p.isdigit())))
'''


@pytest.mark.skipif(worker_isolation.detect() != "namespace", reason="no mount/PID namespaces here")
def test_namespace_workers_cannot_write_the_tree_or_see_the_judge(rendered, tiny_checkpoint, tmp_path):
    target = REPO / "harness" / f"_probe_{os.getpid()}.txt"
    engine = variant(rendered, tmp_path, PROBE % str(target))
    with Worker("engine", engine_dir=engine) as w:
        with pytest.raises(EngineError) as info:
            w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint=str(tiny_checkpoint("bf16")), device="cpu",
                   max_batch=1, max_seq_len=8)
    msg = str(info.value)
    assert msg.count("refused OSError") == 2 and not target.exists(), msg
    assert str(os.getpid()) not in msg.split("pids ")[1].split(","), msg  # its own PID namespace: the judge is not there


def test_process_level_writes_are_caught_as_tampering(rendered, tiny_checkpoint, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint("bf16"), ckpt)
    target = REPO / "harness" / f"_probe_{os.getpid()}.txt"
    engine = variant(rendered, tmp_path, PROBE % str(target))
    try:
        res = gate(engine, ckpt, tmp_path, ("bench",), isolation="process")
    finally:
        target.unlink(missing_ok=True)
    st = res.stages[-1]
    assert st.verdict == "tampered" and not res.ok and res.complete, st
    assert "checkpoint: added extra.bin" in st.error and f"harness/_probe_{os.getpid()}.txt" in st.error, st.error
    assert res.isolation == "process" and res.bench is None  # the stage raised before any figure


# --- the bench ----------------------------------------------------------------------------------

REPEAT_FIRST = '''
_rep_load = load


def load(*a, **k):
    eng = _rep_load(*a, **k)
    own = eng.generate

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        first = own(prompts, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
        return [f * one.max_tokens for f in first]

    eng.generate = generate
    return eng
'''


@pytest.mark.slow
def test_first_token_repeated_is_rejected_by_the_full_output_check(rendered, tiny_checkpoint, tmp_path):
    engine = variant(rendered, tmp_path, REPEAT_FIRST)
    res = gate(engine, tiny_checkpoint("bf16"), tmp_path, ("bench",), baseline=rendered)
    st = res.stages[-1]
    assert st.verdict == "fail" and "not plausible greedy choices" in st.error, st.error


def test_the_bench_replays_timed_calls_at_the_path_noise_parity_measured(rendered, tiny_checkpoint, tmp_path):
    """A gate with parity and bench: parity's decode consistency becomes the replay check's path noise, and every
    call the bench timed (conc32 and ttft here, warm-up included) is replayed, with no token over the bound; without
    parity the replay is skipped and says why."""
    import json

    res = gate(rendered, tiny_checkpoint("bf16"), tmp_path, ("parity", "bench"), baseline=rendered,
               workloads=("ttft", "conc32"))
    assert [st.verdict for st in res.stages] == ["pass", "pass"], [st.error for st in res.stages]
    data = json.loads((tmp_path / "gate.json").read_text())
    noise = max(x for k, x in data["parity"]["consistency"].items() if k.startswith("decode"))
    rc = data["bench"]["replay_check"]
    assert rc["noise"] == noise >= 0 and rc["calls"] == 4 and rc["tokens"] == 2 * (4 * 8 + 1) and rc["over"] == 0, rc
    assert rc["allowed"] == 0  # the CPU shapes' calls are shorter than REPLAY_FLIP_TOKENS: every token is held to the bound
    gate(rendered, tiny_checkpoint("bf16"), tmp_path, ("bench",), baseline=rendered)
    assert "parity" in json.loads((tmp_path / "gate.json").read_text())["bench"]["replay_check"]["skipped"]


def test_lazy_outputs_are_timed_and_the_judge_imports_no_engine(rendered, tiny_checkpoint, tmp_path):
    from harness.gate_stages import engine_copies_loaded
    from harness.workloads import WORKLOADS, CPU_SHAPES, WorkerRunner, measure

    engine = variant(rendered, tmp_path, '''
import time as _time

_lazy_load = load


class _Lazy(list):
    def __iter__(self):
        _time.sleep(1.5)  # the work happens when the outputs are read, after generate() returned
        return super().__iter__()


def load(*a, **k):
    eng = _lazy_load(*a, **k)
    own = eng.generate
    eng.generate = lambda prompts, params: [_Lazy(o) for o in own(prompts, params)]
    return eng
''')
    before = {m for m in sys.modules if m.startswith("_mi_engine_")}  # other tests of this process may import engines
    with Worker("engine", engine_dir=engine) as w:
        w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint=str(tiny_checkpoint("bf16")), device="cpu",
               max_batch=2, max_seq_len=64)
        ms = measure(WORKLOADS["ttft"], WorkerRunner("candidate", w, 1024), CPU_SHAPES, seed=3)
        assert ms >= 1500, ms
        assert engine_copies_loaded(sys.modules, [engine, w.root]) == []
    assert not {m for m in sys.modules if m.startswith("_mi_engine_")} - before


# --- layering -----------------------------------------------------------------------------------

ALLOWED = ("metainfer.targets", "metainfer.checkpoint", "metainfer.formats", "metainfer.errors")


def test_the_judge_imports_only_the_shared_model_facts_of_metainfer():
    bad = []
    for path in sorted((REPO / "harness").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                if (name == "metainfer" or name.startswith("metainfer.")) and not name.startswith(ALLOWED):
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert not bad, "harness/ may import only metainfer's shared model facts:\n" + "\n".join(bad)


def test_a_timeout_inside_parity_stays_a_timeout(rendered, tiny_checkpoint, tmp_path):
    """A decode that hangs: the cleanup that releases the slots must not turn the timeout into 'crashed'."""
    from harness.parity import run_parity

    engine = variant(rendered, tmp_path, '''
import time as _t

_slow_load = load


def load(*a, **k):
    eng = _slow_load(*a, **k)

    def decode(slots, tokens):
        _t.sleep(10_000)

    eng.decode = decode
    return eng
''')
    res = run_parity(engine, tiny_checkpoint("bf16"), seed=1, lengths=(3,), steps=2,
                     limits=WorkerLimits(120, 120, 6, 120, 600))
    assert not res.ok and res.verdict == "timeout" and "engine.decode" in res.error, res.error


def test_a_shared_triton_cache_is_for_trusted_runs_and_never_reaches_a_gate(tmp_path, monkeypatch):
    """Workers share one Triton cache only when the judge's environment names it (the GPU mutation suite);
    otherwise each has its own, and ``python -m harness.gate`` drops the variable before starting any worker."""
    from types import SimpleNamespace

    from harness import gate
    from harness.worker import SHARED_TRITON_CACHE_ENV, Worker

    me = SimpleNamespace(work=tmp_path / "w")
    monkeypatch.delenv(SHARED_TRITON_CACHE_ENV, raising=False)
    assert Worker._env(me)["TRITON_CACHE_DIR"] == f"{tmp_path}/w/triton"
    monkeypatch.setenv(SHARED_TRITON_CACHE_ENV, str(tmp_path / "shared"))
    assert Worker._env(me)["TRITON_CACHE_DIR"] == str(tmp_path / "shared")
    assert gate.main(["--engine", str(tmp_path / "none"), "--checkpoint", str(tmp_path / "none")]) != 0
    assert SHARED_TRITON_CACHE_ENV not in os.environ


def test_a_reply_over_the_judges_cap_is_refused_before_it_is_allocated():
    from harness import worker_protocol

    payload = {"ok": True, "result": [torch.randn(64, 64), torch.randn(64, 64)]}  # 2 x 16 KiB of float32
    for cap, fits in ((20_000, False), (1 << 20, True)):  # a refused message leaves the pipe mid-message: one each
        r, w = os.pipe()
        try:
            os.set_blocking(w, False)
            worker_protocol.send(w, payload)
            if fits:
                assert torch.equal(worker_protocol.recv(r, max_bytes=cap)["result"][1], payload["result"][1])
            else:
                with pytest.raises(worker_protocol.ProtocolError, match="over 20000 bytes"):
                    worker_protocol.recv(r, max_bytes=cap)  # the second buffer crosses it
        finally:
            os.close(r)
            os.close(w)

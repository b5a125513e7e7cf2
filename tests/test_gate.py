"""The gate: usage errors, a green gate on the tiny engine vs itself, a red parity stage stops it, a killed gate leaves its
JSON, a nonce reproduces a run, the typed result round-trips."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import cheats
from cheats import nan_logits, render_tiny
from harness.gate import main
from harness.hashing import harness_digest

REPO = Path(__file__).resolve().parents[1]
QUICK_PARITY = ("--parity-lengths", "1,17", "--parity-steps", "2")  # the full set takes minutes on 2 shared cores


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_tiny(tmp_path_factory.mktemp("gate-render"))


def gate_cmd(engine, checkpoint, out, *extra) -> list[str]:
    return [sys.executable, "-m", "harness.gate", "--engine", str(engine), "--checkpoint", str(checkpoint),
            "--gpu", "cpu", "--seed", "5", "--json", str(out), *QUICK_PARITY, *extra]


def test_usage_errors_exit_2(rendered, tiny_checkpoint, tmp_path, capsys):
    ck = str(tiny_checkpoint("bf16"))
    base = ["--engine", str(rendered), "--checkpoint", ck, "--json", str(tmp_path / "g.json")]
    assert main(base + ["--gpu", "cpu", "--stages", "static,speed"]) == 2
    assert "choose from static,parity,twin,bench,profile" in capsys.readouterr().err
    assert main(["--engine", str(tmp_path / "nope"), "--checkpoint", ck, "--gpu", "cpu", "--json", str(tmp_path / "g.json")]) == 2
    assert main(base + ["--gpu", "cpu", "--workloads", "ttft,fast"]) == 2
    assert main(base + ["--gpu", "cpu", "--rounds", "0"]) == 2
    assert main(base + ["--gpu", "cpu", "--parity-lengths", "1,x"]) == 2
    assert main(base + ["--gpu", "a100"]) == 2 and "unknown GPU" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(base + ["--gpu", "h200"]) == 2 and "use --gpu cpu" in capsys.readouterr().err
    assert main(["--engine", str(rendered)]) == 2  # argparse: required flags missing
    assert not (tmp_path / "g.json").exists()


def test_static_only_gate_is_green_and_well_formed(rendered, tiny_checkpoint, tmp_path):
    out = tmp_path / "g.json"
    assert main(["--engine", str(rendered), "--checkpoint", str(tiny_checkpoint("bf16")), "--gpu", "cpu",
                 "--stages", "static", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["schema"] == 2 and rec["ok"] and rec["complete"] and rec["running"] is None and rec["verdict"] == "pass"
    assert rec["isolation"] in ("namespace", "process") and rec["nonces"]["gate"] >= 0
    # others may be editing harness/ while this runs, so compare the form, not the value
    assert isinstance(rec["seed"], int) and len(rec["harness_digest"]) == len(harness_digest()) == 64
    assert set(rec["env"]) >= {"gpu", "driver", "torch", "triton", "commit"} and rec["env"]["torch"] == torch.__version__
    assert [(s["name"], s["ok"], s["verdict"], s["error"]) for s in rec["stages"]] == [("static", True, "pass", None)]
    assert rec["load_capacity"] is None  # no stage loads an engine


@pytest.mark.slow
def test_red_parity_stops_before_bench(rendered, tiny_checkpoint, tmp_path):
    engine = tmp_path / "root" / rendered.name
    shutil.copytree(rendered, engine)
    nan_logits.apply(engine)
    out = tmp_path / "g.json"
    assert main(["--engine", str(engine), "--checkpoint", str(tiny_checkpoint("bf16")), "--baseline", str(rendered),
                 "--gpu", "cpu", "--rounds", "1", "--workloads", "ttft", *QUICK_PARITY, "--json", str(out)]) == 1
    rec = json.loads(out.read_text())
    assert [s["name"] for s in rec["stages"]] == ["static", "parity"] and not rec["stages"][1]["ok"]
    assert rec["bench"] is None and rec["parity"]["ok"] is False and not rec["ok"] and rec["complete"]
    assert rec["stages"][1]["verdict"] == "fail" and rec["verdict"] == "fail" and "parity" in rec["nonces"]


@pytest.mark.slow
def test_green_gate_against_itself(rendered, tiny_checkpoint, tmp_path):
    out = tmp_path / "g.json"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the gate's own CPU default
    proc = subprocess.run(gate_cmd(rendered, tiny_checkpoint("bf16"), out, "--baseline", str(rendered), "--rounds", "2",
                                   "--workloads", "decode-bs1"), cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rec = json.loads(out.read_text())
    assert rec["threads"] == 1  # one intra-op thread per process on the CPU (harness.gate.cpu_threads)
    assert rec["ok"] and [s["name"] for s in rec["stages"]] == ["static", "parity", "bench"]
    assert rec["parity_quick"] == {"lengths": [1, 17], "steps": 2} and rec["seed"] == 5
    # quick parity's 2 x 20 with decode-bs1's 2 x 32, and at least metainfer serve's default load
    assert rec["load_capacity"] == {"max_batch": 64, "max_seq_len": 4096}
    assert all(s["ok"] and s["seconds"] >= 0 for s in rec["stages"])
    assert rec["parity"]["ok"] and rec["parity"]["max_rel_err"] <= rec["parity"]["tolerance"]
    # quick parity pools 1 decode row per prompt: its consistency threshold is wider than the full set's
    wide = rec["parity"]["consistency_tolerances"]
    assert set(wide) == set(rec["parity"]["consistency"]) and wide["decode alone"] > rec["parity"]["tolerances"]["consistency"]
    bench = rec["bench"]
    assert bench["scaled_down"] and set(bench["workloads"]) == {"decode-bs1"}
    for w in bench["workloads"].values():
        assert w["candidate"]["median"] > 0 and w["baseline"]["median"] > 0 and len(w["candidate"]["samples"]) == 2
        assert 0 < w["roofline_fraction"]
    obj = bench["objective"]
    assert obj["speedup"] > 0 and obj["noise"] >= 0 and isinstance(obj["beats_baseline"], bool)
    check = bench["output_check"]  # every timed output compared with the baseline's, in full
    # the same engine: every paired output identical; decode-bs1 redraws its prompts when a loaded machine inverts
    # t_1 and t_N, and those outputs of one side have no twin (judged by teacher-forced margins instead)
    assert check["sequences"] > 0 and check["identical"] + check["unpaired"] == check["sequences"], check
    assert check["implausible"] == 0 and check["first_agree"] == check["first_compared"], check
    assert set(rec["nonces"]) == {"parity", "bench", "gate"} and rec["parity"]["prompt_nonce"] == rec["nonces"]["parity"]


@pytest.mark.slow
def test_killed_gate_leaves_the_stages_done(rendered, tiny_checkpoint, tmp_path):
    out = tmp_path / "g.json"
    proc = subprocess.Popen(gate_cmd(rendered, tiny_checkpoint("bf16"), out, "--stages", "static,bench", "--baseline", str(rendered),
                                     "--rounds", "500", "--workloads", "conc32"), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 120
        rec: dict = {}
        while time.time() < deadline:
            if out.exists():
                rec = json.loads(out.read_text())  # atomic writes: never half a file
                if rec["running"] == "bench":
                    break
            time.sleep(0.2)
        assert rec.get("running") == "bench", rec
        time.sleep(1.0)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    rec = json.loads(out.read_text())
    assert rec["complete"] is False and rec["ok"] is False and rec["running"] == "bench"
    assert [(s["name"], s["ok"]) for s in rec["stages"]] == [("static", True)]
    assert rec["bench"] is None and rec["schema"] == 2


def test_gate_json_is_strict_even_with_non_finite_figures(tmp_path):
    from harness.gate import write_json

    out = tmp_path / "g.json"
    write_json(out, {"schema": 1, "parity": {"max_rel_err": float("nan"), "x": [float("inf"), 1.0]}})
    text = out.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["parity"] == {"max_rel_err": "nan", "x": ["inf", 1.0]}
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]  # no temp file left behind


def test_integrity_names_a_replaced_judge_function_and_ignores_plain_state():
    import torch

    from harness import integrity

    before = integrity.snapshot()
    saved = torch.Tensor.norm
    setattr(torch.Tensor, "norm", lambda self, *a, **k: saved(self, *a, **k) * 0)
    torch.cuda._metainfer_test_flag = True  # plain state: not watched
    assert integrity.changed(before) == ["torch.Tensor.norm"]
    integrity.restore(before)
    del torch.cuda._metainfer_test_flag
    assert torch.Tensor.norm is saved and integrity.changed(before) == []


def test_gate_result_round_trips_and_reads_schema_1():
    from harness.result import GateResult, StageResult

    res = GateResult(ok=False, complete=True, seed=3, isolation="namespace", nonces={"gate": 9},
                     stages=[StageResult("static", True, "pass", 0.5), StageResult("parity", False, "timeout", 9.0, "killed")],
                     meta={"engine": "/e"})
    back = GateResult.from_json(json.loads(json.dumps(res.to_json())))
    assert back == res and back.verdict == "timeout" and back.failed_stage.name == "parity" and back["engine"] == "/e"
    old = GateResult.from_json({"schema": 1, "ok": False, "stages": [{"name": "parity", "ok": False, "seconds": 1, "error": "x"}]})
    assert old.stages[0].verdict == "fail" and old.verdict == "fail"
    with pytest.raises(ValueError, match="contradicts"):
        StageResult("bench", True, "tampered", 1.0)


@pytest.mark.slow
def test_prompt_nonce_reproduces_the_parity_prompts(rendered, tiny_checkpoint, tmp_path):
    from harness.nonce import prompt_seed, stage_nonce

    outs = []
    for i in range(2):
        out = tmp_path / f"g{i}.json"
        assert main(["--engine", str(rendered), "--checkpoint", str(tiny_checkpoint("bf16")), "--gpu", "cpu", "--seed", "5",
                     "--stages", "parity", "--parity-lengths", "3", "--parity-steps", "1", "--prompt-nonce", "77",
                     "--json", str(out)]) == 0
        outs.append(json.loads(out.read_text()))
    assert outs[0]["nonces"] == outs[1]["nonces"] and outs[0]["nonces"]["parity"] == stage_nonce(77, "parity")
    assert outs[0]["parity"]["max_rel_err"] == outs[1]["parity"]["max_rel_err"]
    assert prompt_seed(5, stage_nonce(77, "parity")) != 5 and prompt_seed(5, None) == 5


def test_parity_covers_every_prompt_length_the_bench_times():
    """Each workload's prompt length joins parity when the set lacks it (a window longer than every parity prompt, or a
    cut armed at the bench's own short prompts, would otherwise be timed and never judged); a gate without bench adds
    nothing."""
    from harness.gate import GateArgs
    from harness.gate_stages import parity_lengths
    from harness.prompts import CPU_LENGTHS, GPU_LENGTHS

    def args(gpu, scale, workloads, stages=("static", "parity", "bench"), lengths=None, jitter=0.0):
        return GateArgs(Path("e"), Path("c"), None, gpu, stages, 1, 3, scale, workloads, Path("g.json"), parity_lengths=lengths,
                        length_jitter=jitter)

    assert parity_lengths(args("h200", "full", ("ttft", "decode-bs1", "conc32"))) == GPU_LENGTHS  # 256: in the set
    assert parity_lengths(args("h200", "full", ("ttft", "prefill-16k", "ttft-8k"))) == (*GPU_LENGTHS, 16000, 8192)
    assert parity_lengths(args("h200", "full", ("ttft-8k",), lengths=(1, 17))) == (1, 17, 8192)
    assert parity_lengths(args("h200", "full", ("prefill-16k",), stages=("static", "parity"))) == GPU_LENGTHS
    assert parity_lengths(args("cpu", "cpu", ("prefill-16k", "ttft-8k"))) == (*CPU_LENGTHS, 96)  # ttft-8k: 64, in the set
    assert parity_lengths(args("cpu", "cpu", ("ttft", "decode-bs1", "conc32"))) == (*CPU_LENGTHS, 16)
    assert parity_lengths(args("cpu", "cpu", ("prefill-16k",), lengths=(1, 17))) == (1, 17, 96)
    # the gate's bench draws its lengths around P (harness.workload_draws): parity draws one from the same range,
    # once per nominal P, even where P itself is in the set
    # a range of at most 5 lengths is covered whole, a wider one has a drawn length in each third of it
    got = parity_lengths(args("cpu", "cpu", ("ttft", "decode-bs1", "conc32", "ttft-8k"), jitter=0.125))
    assert got[: len(CPU_LENGTHS)] == CPU_LENGTHS and got[len(CPU_LENGTHS) : -3] == (14, 15, 16, 17, 18)
    assert [(n.lo, int(n)) for n in got[-3:]] == [(56, 60), (61, 66), (67, 72)]
    got = parity_lengths(args("h200", "full", ("ttft", "conc32"), jitter=0.125))
    assert got[:-3] == GPU_LENGTHS and [(n.lo, int(n)) for n in got[-3:]] == [(224, 244), (245, 266), (267, 288)]
    got = parity_lengths(args("h200", "full", ("ttft-8k",), jitter=0.125))
    assert [(n.lo, int(n)) for n in got[len(GPU_LENGTHS):]] == [(7168, 9216)]  # long: one draw
    assert parity_lengths(GateArgs(Path("e"), Path("c"), None, "cpu", ("parity", "bench"), 1, 3, "cpu", ("ttft",),
                                   Path("g.json")))[-5:] == (14, 15, 16, 17, 18)  # the gate's default jitter


def test_bench_lengths_are_drawn_around_each_workloads_prompt_length():
    """With jitter, a sample's prompt lengths vary around P (per stream for conc, one per round shared by ttft and
    decode-bs1 so decode's floor compares equal prefills), the same for both engines of a round; without, exactly P."""
    from harness.workload_draws import draw_lengths, draw_prompts, length_spread
    from harness.workloads import WORKLOADS, capacity, CPU_SHAPES

    assert draw_lengths(5, 16, 4, 0.0) == [16] * 4
    many = [n for seed in range(200) for n in draw_lengths(seed, 16, 4, 0.125)]
    assert set(many) == {14, 15, 16, 17, 18}
    assert draw_lengths(9, 256, 32, 0.125) == draw_lengths(9, 256, 32, 0.125)
    assert all(draw_lengths(s, 256, 1, 0.125)[0] == draw_lengths(s, 256, 32, 0.125)[0] for s in range(20))
    assert len({tuple(draw_lengths(s, 256, 1, 0.125)) for s in range(20)}) > 5
    assert [len(p) for p in draw_prompts(3, 3, [5, 7, 9], 100)] == [5, 7, 9]
    assert draw_prompts(3, 2, [8, 8], 100) == draw_prompts(3, 2, 8, 100)
    with pytest.raises(ValueError, match="3 prompts need 3 lengths"):
        draw_prompts(3, 3, [5, 7], 100)
    with pytest.raises(ValueError, match="outside"):
        length_spread(16, 0.7)
    w = [WORKLOADS["conc32"]]
    assert capacity(w, CPU_SHAPES, 0.125).max_seq_len == capacity(w, CPU_SHAPES).max_seq_len + 2


class _LoadSeen(Exception):
    """Raised by ``_LoadRecorder`` at an engine load, after recording it: the stage goes no further."""


class _LoadRecorder:
    """A stand-in for ``harness.worker.Worker`` that records ``engine.load``'s capacity and stops the stage there."""

    loads: list[tuple[str, int, int]] = []

    def __init__(self, role, *, engine_dir, **_kw):
        self.role, self.engine_dir, self.stage_deadline = role, Path(engine_dir), None

    def send(self, op, **kw):
        assert op == "engine.load"
        type(self).loads.append((self.role, kw["max_batch"], kw["max_seq_len"]))
        raise _LoadSeen

    call = send

    def close(self):
        pass


class _FakeReference:
    def __init__(self, checkpoint):
        self.checkpoint, self.nonce, self.vocab_size, self.dtype = Path(checkpoint).resolve(), 3, 1024, "float32"
        self.device = "cpu"  # apart from the engine's device: parity sends the engine load before any reference run

    def start(self):
        pass

    def close(self):
        pass


def test_the_gate_loads_at_least_what_serve_loads_by_default():
    """An engine must not tell the judge from ``metainfer serve`` by its load arguments."""
    import inspect

    from harness.workloads import SERVE_CAPACITY
    from metainfer.commands.serve import serve

    params = inspect.signature(serve).parameters
    assert (params["max_batch"].default.default, params["max_seq_len"].default.default) == (
        SERVE_CAPACITY.max_batch, SERVE_CAPACITY.max_seq_len)


@pytest.mark.parametrize("gpu, scale, workloads, stages, lengths, want", [
    ("cpu", "cpu", ("ttft", "decode-bs1", "conc32"), ("static", "parity", "bench", "profile"), None, (64, 4096)),
    ("cpu", "cpu", ("ttft", "decode-bs1", "conc32"), ("static", "parity", "bench"), (1, 17), (64, 4096)),
    ("cpu", "cpu", ("conc128", "prefill-16k"), ("parity", "bench"), (1, 17), (64, 4096)),
    ("h200", "full", ("ttft", "decode-bs1", "conc32"), ("static", "parity", "bench", "profile"), None, (64, 4096)),
    # ttft-8k's prompts are drawn in 8192 +- 1024, and so is a parity prompt: 9216 + 32 decode steps + 1
    ("h200", "full", ("conc128", "ttft-8k"), ("parity", "bench", "profile"), None, (129, 9249)),
])
def test_every_stage_loads_the_engine_with_one_capacity(gpu, scale, workloads, stages, lengths, want, tiny_checkpoint,
                                                        tmp_path, monkeypatch):
    """Parity, both bench engines and the profile ask ``engine.load`` for the same (max_batch, max_seq_len): the union
    of what each stage needs (``gate_capacity``), so load's arguments cannot tell an engine which stage it is in
    (``tests/cheats/bench_from_load_capacity.py`` armed fp8 activations at the bench's capacity)."""
    from harness import bench, parity, profile
    from harness.gate import GateArgs
    from harness.gate_stages import StageContext, gate_capacity, stage_bench, stage_parity, stage_profile
    from harness.worker import WorkerLimits

    (tmp_path / "e" / "engine").mkdir(parents=True)
    (tmp_path / "e" / "engine" / "__init__.py").write_text("")
    ck = tiny_checkpoint("bf16")
    for mod in (bench, parity, profile):
        monkeypatch.setattr(mod, "Worker", _LoadRecorder)
    monkeypatch.setattr(_LoadRecorder, "loads", [])
    a = GateArgs(tmp_path / "e", ck, tmp_path / "e", gpu, stages, 1, 2, scale, workloads, tmp_path / "g.json",
                 parity_lengths=lengths, parity_steps=2 if lengths else None)  # the quick set: 2 steps
    assert (gate_capacity(a).max_batch, gate_capacity(a).max_seq_len) == want
    for stage in (stage_parity, stage_bench, stage_profile):
        if stage.__name__.removeprefix("stage_") in stages:
            with pytest.raises(_LoadSeen):
                stage(StageContext(a, WorkerLimits(), "process", 7, gate_capacity(a), {"reference": _FakeReference(ck)}))
    roles = [r for r, _, _ in _LoadRecorder.loads]
    assert len(roles) == sum(s in stages for s in ("parity", "bench", "profile"))
    assert {(b, n) for _, b, n in _LoadRecorder.loads} == {want}


@pytest.mark.parametrize("omp, want", [(None, 1), ("2", 2)])
def test_cpu_gate_threads_default_to_one_and_follow_omp_num_threads(omp, want):
    """A CPU gate runs one intra-op thread unless OMP_NUM_THREADS names a count (a GPU gate keeps torch's default)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"} | ({"OMP_NUM_THREADS": omp} if omp else {})
    code = "from harness.gate import cpu_threads; import torch; print(cpu_threads('cpu'), torch.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(want), str(want)]


@pytest.mark.parametrize("stages", ["parity", "bench"])
def test_the_real_gate_loads_every_engine_with_the_union_capacity(stages, tiny_checkpoint, tmp_path):
    """Through the real gate (its workers, on the CPU): an engine whose load() raises with its arguments shows that the
    stage's workers ask for ``gate_capacity`` of the gate's arguments (the test above shows that this is one union
    for every stage a gate runs)."""
    from harness.gate import parse_args
    from harness.gate_stages import gate_capacity

    eng = tmp_path / "e" / "engine"
    eng.mkdir(parents=True)
    (eng / "__init__.py").write_text(
        "class SamplingParams:\n    pass\n\n\n"
        "def load(checkpoint, device='cpu', max_batch=1, max_seq_len=1, **kw):\n"
        "    raise RuntimeError(f'LOADED-WITH {max_batch} {max_seq_len}')\n")
    ck = tiny_checkpoint("bf16")
    argv = ["--engine", str(tmp_path / "e"), "--baseline", str(tmp_path / "e"), "--checkpoint", str(ck), "--gpu", "cpu",
            "--stages", stages, "--rounds", "1", "--parity-lengths", "1,17", "--parity-steps", "2",
            "--json", str(tmp_path / "g.json")]
    cap = gate_capacity(parse_args(argv))
    out = subprocess.run([sys.executable, "-m", "harness.gate", *argv], cwd=REPO, capture_output=True, text=True, timeout=600)
    g = json.loads((tmp_path / "g.json").read_text())
    error = " ".join(st.get("error") or "" for st in g["stages"])
    seen = {tuple(map(int, x.split())) for x in __import__("re").findall(r"LOADED-WITH (\d+ \d+)", error)}
    assert out.returncode != 0 and seen == {(cap.max_batch, cap.max_seq_len)}, (error[:500], out.stderr[-500:])

"""The benchmark workloads: per-workload shapes, roofline figures, the new workloads (conc64, conc128, ttft-2k,
ttft-8k, prefill-16k) measured on the tiny engine through the real worker path, and every place that names them."""

from __future__ import annotations

import math

import pytest

from harness.workload_roofline import roofline_figure
from harness.workloads import (CPU_SHAPES, FULL_SHAPES, TIMINGS, WORKLOADS, Shapes, Workload, WorkerRunner, capacity,
                               measure, parse_workloads)
from metainfer.targets import get_gpu, get_model

NEW = ("conc64", "conc128", "ttft-2k", "ttft-8k", "prefill-16k")
REAL = "qwen3.6-35b-a3b"


# --- definitions ----------------------------------------------------------------------------

def test_every_workload_carries_its_own_shapes():
    full = {n: (w.full.prompt, w.full.output, w.full.streams) for n, w in WORKLOADS.items()}
    assert full == {"ttft": (256, 1, 1), "decode-bs1": (256, 256, 1), "conc32": (256, 256, 32), "conc64": (256, 256, 64),
                    "conc128": (256, 256, 128), "ttft-2k": (2048, 1, 1), "ttft-8k": (8192, 1, 1), "prefill-16k": (16000, 1, 1)}
    for w in WORKLOADS.values():
        assert w.at(FULL_SHAPES) is w.full and w.at(CPU_SHAPES) is w.cpu and w.at(w.cpu) is w.cpu
        assert w.cpu.scaled_down and not w.full.scaled_down
        assert w.cpu.streams <= 8 and w.cpu.prompt <= 96 and w.cpu.output <= 8  # the CPU stays cheap
        assert w.timing in TIMINGS
    assert WORKLOADS["conc32"].full == FULL_SHAPES and WORKLOADS["conc32"].cpu == CPU_SHAPES
    assert [WORKLOADS[n].cpu.streams for n in ("conc32", "conc64", "conc128")] == [4, 6, 8]
    units = {n: (w.unit, w.higher_is_better) for n, w in WORKLOADS.items()}
    assert units["ttft-2k"] == units["ttft-8k"] == ("ms", False)
    assert units["prefill-16k"] == ("prompt tok/s", True) and units["conc128"] == ("tok/s", True)


def test_a_shape_that_names_no_scale_is_refused():
    with pytest.raises(ValueError, match="pass FULL_SHAPES or CPU_SHAPES"):
        WORKLOADS["ttft-2k"].at(Shapes(prompt=8, output=1, streams=1, scaled_down=True))


@pytest.mark.parametrize("timing, full, why", [
    ("nap", Shapes(16, 1, 1), "unknown timing"),
    ("ttft", Shapes(16, 4, 1), "1 output token"),
    ("prefill", Shapes(16, 1, 2), "1 output token"),
    ("decode", Shapes(16, 1, 1), "at least 2 output tokens"),
    ("conc", Shapes(16, 8, 0), "bad shape"),
    ("conc", Shapes(16, 8, 4, scaled_down=True), "bad shape"),
])
def test_bad_workload_definitions_are_refused(timing, full, why):
    with pytest.raises(ValueError, match=why):
        Workload("x", "ms", False, "x", timing, full, Shapes(4, 1, 1, scaled_down=True))


def test_unknown_names_list_every_known_one():
    assert [w.name for w in parse_workloads("prefill-16k, conc128,ttft-2k")] == ["prefill-16k", "conc128", "ttft-2k"]
    with pytest.raises(ValueError) as err:
        parse_workloads("ttft,conc256")
    assert "conc256" in str(err.value) and "known: " + ", ".join(WORKLOADS) in str(err.value)
    for n in NEW:
        assert n in str(err.value)


def test_capacity_covers_the_largest_shape():
    default = [WORKLOADS[n] for n in ("ttft", "decode-bs1", "conc32")]
    assert (capacity(default, FULL_SHAPES).max_batch, capacity(default, FULL_SHAPES).max_seq_len) == (33, 520)
    assert (capacity(default, CPU_SHAPES).max_batch, capacity(default, CPU_SHAPES).max_seq_len) == (5, 32)
    every = list(WORKLOADS.values())
    assert capacity(every, FULL_SHAPES).max_batch == 129 and capacity(every, FULL_SHAPES).max_seq_len == 16009
    assert capacity([WORKLOADS["ttft-8k"]], FULL_SHAPES).max_batch == 2
    with pytest.raises(ValueError):
        capacity([], FULL_SHAPES)


# --- roofline -------------------------------------------------------------------------------

def test_every_workload_has_a_roofline_in_its_unit():
    from harness import roofline
    from metainfer.targets import get_quant

    text, h200, q = get_model(REAL).text, get_gpu("h200"), get_quant("nvfp4")
    r = {n: roofline_figure(w, text, "nvfp4", h200, FULL_SHAPES) for n, w in WORKLOADS.items()}
    assert all(math.isfinite(x) and x > 0 for x in r.values()), r
    # the first three as before the per-workload shapes
    assert r["ttft"] == pytest.approx(roofline.ttft_ms(text, q, h200, 256), rel=1e-12)
    assert r["decode-bs1"] == pytest.approx(roofline.decode_tok_s(text, q, h200, 1, 384), rel=1e-12)
    assert r["conc32"] == pytest.approx(roofline.decode_tok_s(text, q, h200, 32, 384), rel=1e-12)
    assert r["conc32"] < r["conc64"] < r["conc128"] < 128 * r["decode-bs1"]
    assert r["ttft"] < r["ttft-2k"] < r["ttft-8k"] and r["ttft-8k"] > 4 * r["ttft-2k"] * 0.9  # prefill grows >= linearly
    assert r["prefill-16k"] == pytest.approx(16000 / roofline.prefill(text, q, 16000).seconds(h200), rel=1e-12)
    # 16k tokens of prefill are compute-bound on the H200: its figure is the FLOP rate over FLOPs per token
    cost = roofline.prefill(text, q, 16000)
    assert cost.flops / (h200.bf16_tflops * 1e12) > cost.total_bytes / (h200.mem_bw_gbs * 1e9)
    assert 5e4 < r["prefill-16k"] < 5e5


# --- the real worker path on the tiny engine --------------------------------------------------

class _Calls:
    """A runner in front of a ``WorkerRunner`` recording (prompt lengths, max_tokens, output lengths, seconds) per call."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner, self.calls = runner, []
        self.name, self.vocab_size, self.device, self.outputs = runner.name, runner.vocab_size, runner.device, runner.outputs

    def generate(self, prompts, max_tokens):
        import time

        t0 = time.perf_counter()
        out = self.runner.generate(prompts, max_tokens)
        self.calls.append(([len(p) for p in prompts], max_tokens, [len(o) for o in out], time.perf_counter() - t0))
        return out


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory):
    from cheats import render_tiny

    return render_tiny(tmp_path_factory.mktemp("workloads-render"))


@pytest.mark.slow  # ~20 s: a worker, the tiny engine's load, five workloads
def test_new_workloads_on_the_tiny_engine_through_a_worker(engine_dir, tiny_checkpoint):
    from harness.worker import Worker

    chosen = [WORKLOADS[n] for n in NEW]
    cap = capacity(chosen, CPU_SHAPES)
    with Worker("engine", engine_dir=engine_dir) as w:
        w.call("engine.load", engine_dir=str(w.engine_dir), checkpoint=str(tiny_checkpoint("bf16")), device="cpu",
               max_batch=cap.max_batch, max_seq_len=cap.max_seq_len)
        runner = WorkerRunner("candidate", w, 1024)
        for i, wl in enumerate(chosen):
            rec = _Calls(runner)
            figure = measure(wl, rec, CPU_SHAPES, seed=11 + i)
            s = wl.cpu
            assert math.isfinite(figure) and figure > 0, (wl.name, figure)
            assert len(rec.calls) == 1, (wl.name, rec.calls)
            lens, max_tokens, out_lens, dt = rec.calls[0]
            assert lens == [s.prompt] * s.streams and max_tokens == s.output and out_lens == [s.output] * s.streams
            # the figure is the workload's formula over the judge's clock, which spans the recorded call
            if wl.timing == "ttft":
                assert figure >= 1e3 * dt
            elif wl.timing == "prefill":
                assert s.prompt / figure >= dt and figure > 0
            else:
                assert s.streams * s.output / figure >= dt
    logged = {(len(p), n) for p, n in runner.outputs}
    assert logged == {(16, 8), (32, 1), (64, 1), (96, 1)}  # every timed call's outputs kept for the A/B check
    assert sum(1 for p, n in runner.outputs if n == 8) == 6 + 8  # conc64 and conc128 at CPU scale


# --- everything that names the workloads ----------------------------------------------------------

def test_trailers_and_report_order_know_every_workload():
    from metainfer.build.decision import WORKLOAD_TRAILERS, trailers
    from metainfer.build.report_data import WORKLOAD_ORDER

    assert tuple(WORKLOAD_TRAILERS) == tuple(WORKLOADS) == WORKLOAD_ORDER
    assert len(set(WORKLOAD_TRAILERS.values())) == len(WORKLOADS)
    bench = {"workloads": {n: {"unit": w.unit, "higher_is_better": w.higher_is_better,
                               "candidate": {"median": 10.0 + i, "spread": 0.01}} for i, (n, w) in enumerate(WORKLOADS.items())}}
    t = trailers({"bench": bench}, 7, "run", 1)
    assert t["Conc64-Tok-S"] == "13" and t["Conc128-Tok-S"] == "14" and t["TTFT-2k-ms"] == "15"
    assert t["TTFT-8k-ms"] == "16" and t["Prefill-16k-Tok-S"] == "17"


def test_gate_and_bench_command_accept_the_new_names(engine_dir, tiny_checkpoint, tmp_path):
    from typer.testing import CliRunner

    from harness.gate import UsageError, parse_args
    from metainfer.cli import app
    from metainfer.errors import MetainferError

    common = ["--engine", str(engine_dir), "--checkpoint", str(tiny_checkpoint("bf16")), "--gpu", "cpu",
              "--json", str(tmp_path / "g.json")]
    assert parse_args(common + ["--workloads", "conc64,ttft-8k,prefill-16k"]).workloads == ("conc64", "ttft-8k", "prefill-16k")
    with pytest.raises(UsageError, match="known: ttft, decode-bs1, conc32, conc64, conc128, ttft-2k, ttft-8k, prefill-16k"):
        parse_args(common + ["--workloads", "conc64,prefill-32k"])
    bench = ["bench", "--engine", str(engine_dir), "--checkpoint", str(tiny_checkpoint("bf16")), "--device", "cpu"]
    for bad, why in (("prefill-32k", "known: ttft, decode-bs1, conc32, conc64"), ("ttft,conc64", "takes one name")):
        r = CliRunner().invoke(app, bench + ["--workload", bad])
        assert isinstance(r.exception, MetainferError) and why in str(r.exception), (bad, r.exception, r.output)


@pytest.mark.slow  # ~20 s: metainfer bench loads the tiny engine in a worker once per call
def test_bench_command_measures_a_new_workload_at_its_own_shape(engine_dir, tiny_checkpoint, tmp_path):
    import json

    from typer.testing import CliRunner

    from metainfer.cli import app

    out = tmp_path / "b.json"
    r = CliRunner().invoke(app, ["bench", "--engine", str(engine_dir), "--checkpoint", str(tiny_checkpoint("bf16")),
                                 "--workload", "conc128", "--device", "cpu", "--rounds", "1", "--json", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    assert "16 in / 8 out / 8 streams" in r.output and "no roofline fraction on the CPU" in r.output
    d = json.loads(out.read_text())
    e = d["engine"]
    assert d["shapes"] == e["shapes"] == WORKLOADS["conc128"].cpu.to_dict()
    assert len(e["samples"]) == 1 and all(math.isfinite(x) and x > 0 for x in e["samples"])
    assert e["roofline"] > 0 and e["unit"] == "tok/s"


@pytest.mark.slow  # ~30 s: two workers, the tiny engine A/B on the five new workloads, one round
def test_ab_bench_of_the_new_workloads(engine_dir, tiny_checkpoint):
    from harness.bench import BenchConfig, run_bench, shapes_for

    config = BenchConfig(list(NEW), 1, 5, shapes_for("cpu"), "cpu", get_gpu("cpu"), warmup=0)
    d = run_bench(engine_dir, tiny_checkpoint("bf16"), config, baseline_dir=engine_dir).data
    assert list(d["workloads"]) == list(NEW)
    for name, w in d["workloads"].items():
        assert w["shapes"] == WORKLOADS[name].cpu.to_dict() and w["unit"] == WORKLOADS[name].unit
        for side in ("candidate", "baseline"):
            assert len(w[side]["samples"]) == 1 and all(math.isfinite(x) and x > 0 for x in w[side]["samples"])
        assert w["roofline"] > 0 and w["roofline_fraction"] > 0
    check = d["output_check"]
    assert check["sequences"] == 6 + 8 + 1 + 1 + 1 and check["implausible"] == 0  # every timed output compared

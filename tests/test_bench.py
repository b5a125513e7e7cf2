"""Benchmarks: A/B statistics on synthetic samples, roofline figures of the real target, workloads on the tiny engine."""

from __future__ import annotations

import math

import pytest
import torch

from cheats import render_tiny
from harness import roofline, stats
from harness.bench import BenchConfig, run_bench, shapes_for
from harness.workloads import CPU_SHAPES, BenchError, draw_prompts, parse_workloads
from metainfer.targets import QuantSpec, get_gpu, get_model, get_quant

REAL = "qwen3.6-35b-a3b"


# --- A/B statistics ---------------------------------------------------------------------

def test_clear_gain_beats_baseline():
    base = [100.0, 101.0, 99.0, 100.5, 100.0]
    cand = [120.0, 121.0, 119.5, 120.0, 121.0]
    ab = stats.compare(cand, base, higher_is_better=True)
    assert ab.ratio == pytest.approx(1.2, rel=0.01) and ab.noise < 0.02
    obj = stats.objective({"decode-bs1": ab})
    assert obj.beats_baseline and obj.speedup == pytest.approx(ab.ratio)


def test_noise_wider_than_gain_does_not_beat():
    base = [100.0, 80.0, 120.0, 95.0, 110.0]
    cand = [104.0, 118.0, 86.0, 103.0, 100.0]  # median ratio > 1, but the paired ratios swing ±30 %
    ab = stats.compare(cand, base, higher_is_better=True)
    assert ab.ratio > 1.0 and ab.noise > ab.ratio - 1.0
    assert not stats.objective({"decode-bs1": ab}).beats_baseline


def test_latency_ratio_is_inverted():
    ab = stats.compare([50.0, 50.0, 51.0], [100.0, 100.0, 100.0], higher_is_better=False)  # ms: candidate twice as fast
    assert ab.ratio == pytest.approx(2.0, rel=0.02)


def test_one_regressed_workload_blocks_the_win():
    fast = stats.compare([200.0, 201.0, 199.0], [100.0, 100.0, 100.0], True)
    slow = stats.compare([80.0, 81.0, 80.0], [100.0, 100.0, 100.0], True)
    obj = stats.objective({"decode-bs1": fast, "conc32": slow})
    assert obj.speedup > 1.2 and obj.speedup - 1 > obj.noise
    assert not obj.beats_baseline and obj.regressed == ["conc32"]


def test_geomean_and_rms_noise():
    a = stats.WorkloadAB(2.0, 0.1, [2.0])
    b = stats.WorkloadAB(0.5, 0.3, [0.5])
    obj = stats.objective({"a": a, "b": b})
    assert obj.speedup == pytest.approx(1.0) and obj.noise == pytest.approx(math.sqrt((0.01 + 0.09) / 2))


@pytest.mark.parametrize("bad", [[float("nan"), 1.0], [1.0, float("inf")], [0.0, 1.0], []])
def test_bad_samples_are_rejected(bad):
    with pytest.raises(ValueError):
        stats.compare(bad or [], [1.0, 1.0][: len(bad)] or [], True)
    if bad:
        with pytest.raises(ValueError):
            stats.spread(bad)


def test_unpaired_samples_are_rejected():
    with pytest.raises(ValueError, match="one candidate and one baseline sample per round"):
        stats.compare([1.0, 2.0], [1.0], True)


def test_spread_is_relative_range():
    assert stats.spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)


# --- roofline -----------------------------------------------------------------------------

def test_roofline_reproduces_design_figures():
    text, h200 = get_model(REAL).text, get_gpu("h200")
    step = roofline.decode_step(text, get_quant("nvfp4"), 1, 0, weights_only=True)
    assert step.total_bytes == pytest.approx(4.27e9, rel=0.02)  # DESIGN.md: 4.27 GB per token
    assert roofline.decode_tok_s(text, get_quant("nvfp4"), h200, weights_only=True) == pytest.approx(1000, rel=0.03)
    all_fp4 = QuantSpec("nvfp4-all", ("q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z", "out_proj",
                                      "experts", "shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.down_proj"), 4.5, "")
    assert roofline.decode_tok_s(text, all_fp4, h200, weights_only=True) == pytest.approx(1770, rel=0.03)


def test_roofline_state_and_batch_terms():
    text, q = get_model(REAL).text, get_quant("nvfp4")
    one = roofline.decode_step(text, q, 1, 384)
    # GDN state: 30 layers x 32 heads x 128 x 128 fp32, read and written (+ conv state)
    assert one.state_bytes == pytest.approx(30 * 2 * 32 * 128 * 128 * 4, rel=0.03)
    assert one.kv_bytes == pytest.approx(10 * 2 * 2 * 256 * 2 * 385)
    b32 = roofline.decode_step(text, q, 32, 384)
    assert one.weight_bytes < b32.weight_bytes < 32 * one.weight_bytes
    assert roofline.expected_distinct_experts(256, 8, 1) == pytest.approx(8)
    assert roofline.expected_distinct_experts(256, 8, 4096) == pytest.approx(256, rel=1e-6)
    assert roofline.decode_tok_s(text, q, get_gpu("h200"), 32, 384) > 5 * roofline.decode_tok_s(text, q, get_gpu("h200"), 1, 384)
    assert 1.0 < roofline.ttft_ms(text, q, get_gpu("h200"), 256) < 20.0
    with pytest.raises(ValueError):
        roofline.decode_step(text, q, 0)


# --- workloads ----------------------------------------------------------------------------

def test_parse_workloads_and_prompts():
    assert [w.name for w in parse_workloads("conc32,ttft")] == ["conc32", "ttft"]
    with pytest.raises(ValueError, match="known: ttft, decode-bs1, conc32"):
        parse_workloads("ttft,decode")
    a, b = draw_prompts(3, 2, 32, 1024), draw_prompts(3, 2, 32, 1024)
    assert a == b and a[0] != a[1] and all(0 <= t < 1024 for p in a for t in p) and len(a[0]) == 32
    assert draw_prompts(4, 2, 32, 1024) != a


@pytest.fixture(scope="module")
def engine_dir(tmp_path_factory):
    return render_tiny(tmp_path_factory.mktemp("bench-render"))


@pytest.mark.slow
def test_ab_bench_of_tiny_engine_against_itself(engine_dir, tiny_checkpoint):
    config = BenchConfig(["ttft", "decode-bs1", "conc32"], 2, 7, shapes_for("cpu"), "cpu", get_gpu("cpu"))
    res = run_bench(engine_dir, tiny_checkpoint("bf16"), config, baseline_dir=engine_dir)
    d = res.data
    assert res.ok and d["scaled_down"] is True and d["shapes"] == CPU_SHAPES.to_dict()
    for name, w in d["workloads"].items():
        for side in ("candidate", "baseline"):
            s = w[side]
            assert len(s["samples"]) == 2 and all(x > 0 and math.isfinite(x) for x in s["samples"])
            assert s["median"] > 0 and s["spread"] >= 0
        assert w["roofline"] > 0 and 0 < w["roofline_fraction"] and math.isfinite(w["noise"])
    obj = d["objective"]
    assert set(obj) >= {"speedup", "noise", "beats_baseline"} and obj["speedup"] > 0


def test_short_outputs_are_a_bench_error(engine_dir, tiny_checkpoint, tmp_path):
    import shutil

    from cheats import short_outputs

    cheat = tmp_path / "cheat"
    shutil.copytree(engine_dir, cheat)
    short_outputs.apply(cheat)
    config = BenchConfig(["conc32"], 1, 7, shapes_for("cpu"), "cpu", get_gpu("cpu"), warmup=0)
    with pytest.raises(BenchError, match="ignore_eos"):
        run_bench(cheat, tiny_checkpoint("bf16"), config)


# --- metainfer bench ----------------------------------------------------------------------

def _cli(*args: str) -> tuple[int, str]:
    """``metainfer bench ARGS`` in-process: (exit status, output); a MetainferError is exit 2 as in ``metainfer.cli.main``."""
    from typer.testing import CliRunner

    from metainfer.cli import app
    from metainfer.errors import MetainferError

    r = CliRunner().invoke(app, ["bench", *args])
    if isinstance(r.exception, MetainferError):
        return 2, str(r.exception)
    return r.exit_code, r.output


def test_bench_command_rejects_bad_input_before_measuring(engine_dir, tiny_checkpoint):
    ck = str(tiny_checkpoint("bf16"))
    common = ("--engine", str(engine_dir), "--checkpoint", ck, "--device", "cpu")
    rc, text = _cli(*common, "--workload", "decode")
    assert rc == 2 and "known: ttft, decode-bs1, conc32" in text
    rc, text = _cli(*common, "--workload", "ttft", "--peer", "vllm")
    assert rc == 2 and "needs CUDA" in text
    rc, text = _cli(*common, "--workload", "ttft", "--peer", "sglang")
    assert rc == 2 and "known peers: hf, vllm" in text


@pytest.mark.slow
def test_bench_command_with_hf_peer(engine_dir, tiny_checkpoint, tmp_path):
    out = tmp_path / "b.json"
    rc, text = _cli("--engine", str(engine_dir), "--checkpoint", str(tiny_checkpoint("bf16")), "--workload", "ttft",
                    "--device", "cpu", "--rounds", "2", "--peer", "hf", "--json", str(out))
    assert rc == 0, text
    assert "no roofline fraction on the CPU" in text and "% of roofline" not in text and "hf:" in text
    import json

    d = json.loads(out.read_text())
    for side in (d["engine"], d["peer"]):
        assert side["median"] > 0 and len(side["samples"]) == 2 and all(math.isfinite(x) for x in side["samples"])
    assert d["engine"]["roofline_fraction"] > 0 and d["env"]["torch"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_ab_bench_full_shapes_on_cuda(engine_dir, tiny_checkpoint):
    from metainfer.targets import detect

    config = BenchConfig(["ttft", "decode-bs1", "conc32"], 3, 7, shapes_for("full"), "cuda", detect())
    d = run_bench(engine_dir, tiny_checkpoint("bf16"), config, baseline_dir=engine_dir).data
    assert d["scaled_down"] is False and d["shapes"]["prompt"] == 256 and d["shapes"]["streams"] == 32
    for w in d["workloads"].values():
        assert 0 < w["roofline_fraction"] <= 1.0, w  # nothing beats the bytes it must move
        assert all(math.isfinite(x) and x > 0 for x in w["candidate"]["samples"] + w["baseline"]["samples"])


def test_a_lost_round_means_not_beating_even_with_a_large_median_gain():
    from harness import stats

    ab = stats.compare([300.0, 310.0, 90.0], [100.0, 100.0, 100.0], higher_is_better=True)  # 3.0, 3.1, 0.9
    obj = stats.objective({"decode-bs1": ab})
    assert obj.speedup > 2 and not obj.beats_baseline
    won = stats.objective({"decode-bs1": stats.compare([300.0, 310.0, 305.0], [100.0, 100.0, 100.0], True)})
    assert won.beats_baseline

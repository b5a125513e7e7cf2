"""The vLLM runner's workloads are ours: names, units, direction, shapes and timing; its arguments, prompt plan
and model length for the new workloads; the run path against a stand-in vLLM (no GPU, no vLLM)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.peers.vllm import results
from harness.peers.vllm.run_vllm import parse_args, plan_prompts
from harness.workloads import WORKLOADS
from fake_vllm import FAKE_VLLM

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "harness" / "peers" / "vllm" / "run_vllm.py"
NEW = "conc64,conc128,ttft-2k,ttft-8k,prefill-16k"


def test_vllm_definitions_equal_ours():
    assert list(results.WORKLOADS) == list(WORKLOADS)
    for name, theirs in results.WORKLOADS.items():
        ours = WORKLOADS[name]
        assert (theirs.name, theirs.unit, theirs.higher_is_better, theirs.timing) == \
            (ours.name, ours.unit, ours.higher_is_better, ours.timing), name
        assert (theirs.batch, theirs.prompt_len, theirs.max_tokens) == (ours.full.streams, ours.full.prompt, ours.full.output), name
        assert theirs.method
    assert set(results.TIMINGS) == {w.timing for w in WORKLOADS.values()}


def test_model_len_follows_the_selected_workloads():
    args = ["--checkpoint", "c", "--out", "o.json"]
    assert parse_args(args).max_model_len == 4096
    assert parse_args(args + ["--workloads", "conc128,ttft-2k"]).max_model_len == 4096
    assert parse_args(args + ["--workloads", "ttft-8k"]).max_model_len == 16384
    assert parse_args(args + ["--workloads", NEW]).max_model_len == 16384
    assert parse_args(args + ["--workloads", "prefill-16k", "--max-model-len", "20000"]).max_model_len == 20000
    assert results.model_len_needed(["ttft", "prefill-16k"]) == 16001


@pytest.mark.parametrize("extra, why", [
    (["--workloads", "prefill-16k", "--max-model-len", "8192"], "below the 16001 tokens"),
    (["--workloads", "conc64,conc256"], "unknown workload"),
])
def test_bad_arguments_exit_with_a_message(extra, why, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--checkpoint", "c", "--out", "o"] + extra)
    assert e.value.code == 2 and why in capsys.readouterr().err


def test_prompt_plan_of_the_new_workloads():
    a = parse_args(["--checkpoint", "c", "--out", "o", "--workloads", NEW, "--reps", "2", "--reps-long", "1", "--seed", "3"])
    plan = plan_prompts(a, 1000)
    shapes = {n: ({len(b) for b in batches}, {len(p) for b in batches for p in b}, len(batches)) for n, batches in plan.items()}
    assert shapes == {"conc64": ({64}, {256}, 2), "conc128": ({128}, {256}, 2), "ttft-2k": ({1}, {2048}, 3),
                      "ttft-8k": ({1}, {8192}, 3), "prefill-16k": ({1}, {16000}, 3)}
    flat = [tuple(p) for batches in plan.values() for b in batches for p in b]
    assert len(set(flat)) == len(flat) and max(max(p) for p in flat) < 1000




@pytest.mark.slow  # a subprocess that imports torch: ~5 s idle, 25 s on a loaded 2-core machine
def test_new_workloads_run_against_a_stand_in_vllm(tmp_path):
    from metainfer.checkpoint.writer import checkpoint_config
    from metainfer.targets import get_model, get_quant

    config, _ = checkpoint_config(get_model("qwen3.6-35b-a3b"), get_quant("nvfp4"))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    fake = tmp_path / "fake" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_VLLM)
    (fake / "inputs.py").write_text("def TokensPrompt(*, prompt_token_ids):\n    return {'prompt_token_ids': list(prompt_token_ids)}\n")
    out, kw = tmp_path / "vllm.json", tmp_path / "kw.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "FAKE_VLLM_KWARGS": str(kw)}
    r = subprocess.run([sys.executable, str(RUN), "--checkpoint", str(tmp_path / "ckpt"), "--out", str(out),
                        "--workloads", NEW, "--reps", "2", "--reps-long", "1"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    w = res["workloads"]
    assert list(w) == NEW.split(",") and res["error"] is None
    assert all(len(v["samples"]) == (2 if n.startswith(("ttft", "prefill")) else 1) for n, v in w.items())
    assert all(math.isfinite(x) and x > 0 for v in w.values() for x in v["samples"])
    assert w["prefill-16k"]["unit"] == "prompt tok/s" and w["ttft-8k"]["unit"] == "ms"
    assert w["prefill-16k"]["median"] < 16000 / 0.016  # 16000 tokens slept >= 16 ms
    assert w["ttft-8k"]["median"] > w["ttft-2k"]["median"] > 2.0  # ms: 8.4 ms and 2.2 ms of sleep
    assert w["conc128"]["median"] > w["conc64"]["median"]  # more streams per sleep
    assert json.loads(kw.read_text())["max_model_len"] == 16384

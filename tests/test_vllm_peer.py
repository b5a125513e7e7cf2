"""CPU tests of the vLLM peer: bundle split/stage/join, the device scripts on a stand-in bundle,
and run_vllm.py's arguments, prompts, statistics and result JSON (dry run: no vLLM import)."""

from __future__ import annotations

import io
import json
import math
import os
import random
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from harness.peers.vllm import bundle, results
from harness.peers.vllm.run_vllm import main as run_main, parse_args
from metainfer.checkpoint.writer import checkpoint_config
from metainfer.targets import get_model, get_quant
from fake_vllm import FAKE_VLLM

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "harness" / "peers" / "vllm"


def _payload(path: Path, n: int, seed: int = 0) -> bytes:
    data = random.Random(seed).randbytes(n)
    path.write_bytes(data)
    return data


# --- bundle.py --------------------------------------------------------------------------------

def test_split_sizes_hashes_and_join_roundtrip(tmp_path):
    data = _payload(tmp_path / "b.tar.xz", 10_007)
    m = bundle.split(tmp_path / "b.tar.xz", tmp_path / "out", part_bytes=3_000, note="t")
    assert [p.name for p in m.parts] == ["part00", "part01", "part02", "part03"]
    assert [p.bytes for p in m.parts] == [3000, 3000, 3000, 1007]
    assert m.bytes == 10_007 and m.note == "t"
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk["format"] == 1 and on_disk["parts"][3]["sha256"] == bundle.sha256_file(tmp_path / "out" / "part03")
    joined = bundle.join(tmp_path / "out", tmp_path / "j")
    assert (tmp_path / "j").read_bytes() == data and joined == bundle.read_manifest(tmp_path / "out")


def test_split_is_idempotent_and_rebuilds_on_change(tmp_path):
    _payload(tmp_path / "b", 5_000)
    bundle.split(tmp_path / "b", tmp_path / "out", part_bytes=2_000)
    before = (tmp_path / "out" / "part00").stat().st_mtime_ns
    bundle.split(tmp_path / "b", tmp_path / "out", part_bytes=2_000)
    assert (tmp_path / "out" / "part00").stat().st_mtime_ns == before
    _payload(tmp_path / "b", 1_500, seed=1)  # new tarball, one part: stale part01/02 must go
    m = bundle.split(tmp_path / "b", tmp_path / "out", part_bytes=2_000)
    assert len(m.parts) == 1 and sorted(p.name for p in (tmp_path / "out").glob("part*")) == ["part00"]


def test_stage_detects_corrupt_truncated_and_unknown_parts(tmp_path):
    _payload(tmp_path / "b", 5_000)
    src, dest = tmp_path / "src", tmp_path / "dest"
    bundle.split(tmp_path / "b", src, part_bytes=2_000)
    bundle.stage(1, src, dest)
    assert bundle.staged(dest, bundle.read_manifest(dest)) == ["part01"]
    with pytest.raises(bundle.BundleError, match="not in"):
        bundle.stage(7, src, dest)
    raw = bytearray((src / "part00").read_bytes())
    raw[17] ^= 0xFF
    (src / "part00").write_bytes(bytes(raw))
    with pytest.raises(bundle.BundleError, match="sha256"):
        bundle.stage(0, src, dest)
    assert not (dest / "part00").exists()  # the bad copy is not left behind as staged
    with pytest.raises(bundle.BundleError, match="part00 missing"):
        bundle.join(dest, tmp_path / "j")
    (dest / "part01").write_bytes((dest / "part01").read_bytes()[:-1])
    with pytest.raises(bundle.BundleError, match="truncated"):
        bundle.check_part(dest, bundle.read_manifest(dest).parts[1])


def test_part_name_bounds():
    assert bundle.part_name(0) == "part00" and bundle.part_name(42) == "part42"
    with pytest.raises(ValueError, match="out of range"):
        bundle.part_name(100)


# --- device scripts on a stand-in bundle (a fake vllm package + one real wheel) ----------------

def _wheel(folder: Path) -> Path:
    """A minimal valid py3-none-any wheel of a module ``peerdep`` (pip installs it offline)."""
    path = folder / "peerdep-1.0-py3-none-any.whl"
    files = {"peerdep.py": "VALUE = 41 + 1\n",
             "peerdep-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: peerdep\nVersion: 1.0\n",
             "peerdep-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr("peerdep-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in files) + "peerdep-1.0.dist-info/RECORD,,\n")
    return path


def _fake_bundle(tmp_path: Path) -> Path:
    fake = {"site/vllm/__init__.py": "import peerdep\n__version__ = f'0.0.{peerdep.VALUE}'\nfrom .api import LLM, SamplingParams\n",
            "site/vllm/api.py": "class LLM: pass\nclass SamplingParams: pass\n",
            "site/vllm/_custom_ops.py": ""}
    tar = tmp_path / "fake.tar.xz"
    with tarfile.open(tar, "w:xz") as t:
        for name, text in fake.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            t.addfile(info, io.BytesIO(text.encode()))
        t.add(_wheel(tmp_path), arcname="wheels/peerdep-1.0-py3-none-any.whl")
    return tar


def test_stage_part_and_install_scripts_end_to_end(tmp_path):
    repo = tmp_path / "repo"  # the repo-root copy on the device: scripts read .vllm_bundle/ from cwd
    m = bundle.split(_fake_bundle(tmp_path), repo / ".vllm_bundle", part_bytes=300)
    assert len(m.parts) >= 2
    env = {**os.environ, "VLLM_BUNDLE_STAGE": str(tmp_path / "stage"), "VLLM_SITE": str(tmp_path / "site"), "PYTHONPATH": ""}
    for i in range(len(m.parts)):
        r = subprocess.run(["bash", str(PEER / "stage_part.sh"), f"{i:02d}"], cwd=repo, env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert f"staged {i + 1}/{len(m.parts)} parts" in r.stdout
    r = subprocess.run(["bash", str(PEER / "install.sh")], cwd=repo, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "vllm 0.0.42 from " + str(tmp_path / "site") in r.stdout
    again = subprocess.run(["bash", str(PEER / "install.sh")], cwd=repo, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "installed the vLLM bundle" not in again.stdout and "vllm 0.0.42" in again.stdout


def test_stage_part_rejects_bad_index(tmp_path):
    r = subprocess.run(["bash", str(PEER / "stage_part.sh"), "x"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


# --- run_vllm.py / results.py ----------------------------------------------------------------

@pytest.fixture
def full_config_dir(tmp_path) -> Path:
    """A folder with the full-size NVFP4 config.json our writer produces (no weights: the dry run reads only the config)."""
    config, _ = checkpoint_config(get_model("qwen3.6-35b-a3b"), get_quant("nvfp4"))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    return tmp_path / "ckpt"


def test_help_runs_without_vllm():
    r = subprocess.run([sys.executable, str(PEER / "run_vllm.py"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--gpu-memory-utilization" in r.stdout and "--greedy-prompts" in r.stdout


def test_parse_args_defaults_and_errors(tmp_path):
    a = parse_args(["--checkpoint", "c", "--out", "o.json"])
    assert a.gpu_memory_utilization == 0.8 and a.max_model_len == 4096 and not a.prefix_caching
    with pytest.raises(SystemExit) as e:
        parse_args(["--checkpoint", "c", "--out", "o", "--workloads", "ttft,bogus"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        parse_args(["--checkpoint", "c", "--out", "o", "--gpu-memory-utilization", "1.5"])


def test_dry_run_writes_result_shape(full_config_dir, tmp_path):
    prompts = {"prompts": [[1, 2, 3], [248043] * 7], "max_tokens": 5}
    (tmp_path / "g.json").write_text(json.dumps(prompts))
    out = tmp_path / "res" / "vllm.json"
    rc = run_main(["--checkpoint", str(full_config_dir), "--out", str(out), "--dry-run", "--greedy-prompts", str(tmp_path / "g.json")])
    assert rc == 0
    r = json.loads(out.read_text())
    assert r["peer"] == "vllm" and r["dry_run"] is True and r["error"] is None
    assert r["checkpoint"] == str(full_config_dir.resolve())
    assert set(r["workloads"]) == {"ttft", "decode-bs1", "conc32"}
    assert r["workloads"]["ttft"]["unit"] == "ms" and r["workloads"]["conc32"]["unit"] == "tok/s"
    assert all(w["median"] is None and w["samples"] == [] for w in r["workloads"].values())
    assert r["greedy"] == {"max_tokens": 5, "prompts": prompts["prompts"], "tokens": []}
    assert r["settings"]["prompt_ids"] == [0, 248044] and r["settings"]["language_model_only"] is True
    assert "vllm" not in sys.modules


def test_dry_run_rejects_missing_checkpoint_and_bad_prompts(full_config_dir, tmp_path, capsys):
    assert run_main(["--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path / "o.json"), "--dry-run"]) == 1
    assert "config.json not found" in capsys.readouterr().err
    (tmp_path / "g.json").write_text(json.dumps([[1, 2], [5, 248320]]))
    assert run_main(["--checkpoint", str(full_config_dir), "--out", str(tmp_path / "o.json"), "--dry-run",
                     "--greedy-prompts", str(tmp_path / "g.json")]) == 1
    assert "prompt 1" in capsys.readouterr().err


def test_token_high_and_prompt_plan(full_config_dir):
    config = json.loads((full_config_dir / "config.json").read_text())
    high = results.token_high(config)
    assert high == 248044
    assert results.token_high({"vocab_size": 1000}) == 1000
    with pytest.raises(ValueError, match="vocab_size"):
        results.token_high({"text_config": {}})
    a = parse_args(["--checkpoint", str(full_config_dir), "--out", "o", "--reps", "3", "--reps-long", "2"])
    from harness.peers.vllm.run_vllm import plan_prompts

    plan = plan_prompts(a, high)
    assert [len(plan[n]) for n in ("ttft", "decode-bs1", "conc32")] == [4, 3, 3]
    assert {len(b) for b in plan["conc32"]} == {32} and {len(p) for b in plan["conc32"] for p in b} == {256}
    flat = [tuple(p) for b in plan["ttft"] + plan["decode-bs1"] + plan["conc32"] for p in b]
    assert len(set(flat)) == len(flat)  # every repetition gets a fresh prompt (no prefix-cache hits)
    assert max(max(p) for p in flat) < high and plan == plan_prompts(a, high)


def test_summarize_median_spread_and_nan():
    s = results.summarize([210.0, 232.5, 229.0, 240.0], "tok/s", True, "m")
    assert math.isclose(s["median"], 230.75) and math.isclose(s["spread"], 30.0) and s["samples"][1] == 232.5
    with pytest.raises(ValueError, match="non-finite"):
        results.summarize([1.0, float("nan")], "ms", False)


def test_probe_global_scales_counts_differing_gate_up_pairs(tmp_path):
    import torch
    from safetensors.torch import save_file

    from harness.peers.vllm.run_vllm import probe_global_scales

    p = "model.language_model.layers.0.mlp."
    t = {f"{p}experts.0.gate_proj.weight_scale_2": torch.tensor(0.5), f"{p}experts.0.up_proj.weight_scale_2": torch.tensor(0.5),
         f"{p}experts.1.gate_proj.weight_scale_2": torch.tensor(0.25), f"{p}experts.1.up_proj.weight_scale_2": torch.tensor(0.75),
         f"{p}shared_expert.gate_proj.weight_scale_2": torch.tensor(2.0), f"{p}shared_expert.up_proj.weight_scale_2": torch.tensor(1.0)}
    save_file(t, str(tmp_path / "model.safetensors"))
    assert probe_global_scales(tmp_path) == {"pairs_checked": 3, "pairs_differing": 2, "max_ratio": 3.0}
    assert probe_global_scales(tmp_path, limit=1)["pairs_checked"] == 1
    (tmp_path / "model.safetensors").unlink()
    assert probe_global_scales(tmp_path) == {"pairs_checked": 0, "pairs_differing": 0, "max_ratio": 1.0}




@pytest.mark.slow  # a subprocess that imports torch: ~5 s idle, 25 s on a loaded 2-core machine
def test_full_run_path_against_a_stand_in_vllm(full_config_dir, tmp_path):
    fake = tmp_path / "fake" / "vllm"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(FAKE_VLLM)
    (fake / "inputs.py").write_text("def TokensPrompt(*, prompt_token_ids):\n    return {'prompt_token_ids': list(prompt_token_ids)}\n")
    out, kw = tmp_path / "vllm.json", tmp_path / "kw.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "FAKE_VLLM_KWARGS": str(kw)}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    r = subprocess.run([sys.executable, str(PEER / "run_vllm.py"), "--checkpoint", str(full_config_dir), "--out", str(out),
                        "--reps", "3", "--reps-long", "2", "--gpu-memory-utilization", "0.4"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert res["version"] == "0.25.1-fake" and res["error"] is None and res["startup_s"] >= 0
    w = res["workloads"]
    assert len(w["ttft"]["samples"]) == 3 and len(w["decode-bs1"]["samples"]) == 2 and len(w["conc32"]["samples"]) == 2
    assert 4.0 < w["ttft"]["median"] < 200.0  # ms: one sleep of ~4.2 ms plus overhead
    # tok/s: (256 - 1) / (t_256 - t_1) cancels the fixed 4 ms but not either call's sleep overshoot (a first call
    # late by 3 ms on a loaded machine read 5,297 against the sleeps' 5,000), so only "about 5,000" is asserted
    assert 2500 < w["decode-bs1"]["median"] < 10000
    assert w["conc32"]["median"] > w["decode-bs1"]["median"]  # 32 streams per sleep
    assert all(math.isfinite(x) for v in w.values() for x in v["samples"])
    g = res["greedy"]
    assert g["max_tokens"] == 16 and [len(t) for t in g["tokens"]] == [16] * 4
    assert g["tokens"][0] == [(sum(g["prompts"][0]) + i) % 997 for i in range(16)]
    k = json.loads(kw.read_text())
    assert k["language_model_only"] is True and k["gdn_prefill_backend"] == "triton" and k["skip_tokenizer_init"] is True
    assert k["gpu_memory_utilization"] == 0.4 and k["max_model_len"] == 4096 and k["enable_prefix_caching"] is False

"""The gate's profile stage: kernel names grouped into ops, roofline figures only where roofline.py separates an op's
traffic, the stage run for real (tiny engine in a worker, CPU), its advisory failure, and the HTML report of it."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from cheats import append, render_tiny
from harness import roofline
from harness.gate import GateArgs, default_stages, main, parse_args, run_gate
from harness.profile import ProfileError, summarize
from harness.profile_groups import GROUP_NAMES, group_of
from harness.worker import WorkerLimits
from metainfer.targets import get_gpu, get_quant

REPO = Path(__file__).resolve().parents[1]
FAST = WorkerLimits(start_s=120, load_s=120, call_s=120, static_s=120, stage_s=600)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_tiny(tmp_path_factory.mktemp("profile-render"))


def _gate(engine: Path, checkpoint: Path, out: Path, timeout: float = 300):
    args = GateArgs(engine, checkpoint, None, "cpu", ("profile",), 11, 1, "cpu", ("conc32",), out, limits=FAST,
                    profile_batch=2, profile_timeout=timeout)
    return run_gate(args)


def test_kernel_names_group_into_ops():
    cases = {
        "nvfp4_gemv_kernel": "nvfp4_gemm", "_moe_gemm_kernel": "moe", "_down_token_kernel": "moe", "_reduce_kernel": "moe",
        "_gdn_step_kernel": "gdn_recurrent", "_gdn_state_kernel": "gdn_chunk", "_gdn_prefill_kernel": "gdn_chunk",
        "_conv_update_kernel": "conv1d", "_conv1d_prefill_kernel": "conv1d", "aten::mkldnn_convolution": "conv1d",
        "_qk_norm_rope_kernel": "rope", "_gated_rmsnorm_kernel": "rmsnorm", "_rmsnorm_kernel": "rmsnorm",
        "_attention_decode_kernel": "attention", "_attn_prefill_kernel": "attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "attention", "_combine_kernel": "combine",
        "_route_kernel": "routing", "void at::native::sbtopk::gatherTopK<float, unsigned int, 1, false>(": "routing",
        "nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT": "gemm", "void cublasLt::splitKreduce_kernel<32, 16, int>": "gemm",
        "void reduce_1Block_kernel<float, 128, 7, cublasGemvTensorStridedBatched<float>": "gemm", "aten::mm": "gemm",
        "Memcpy HtoD (Pageable -> Device)": "memcpy", "Memset (Device)": "memcpy", "aten::copy_": "memcpy",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(": "memcpy",
        "void at::native::vectorized_elementwise_kernel<8, at::native::silu_kernel(": "elementwise",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>": "elementwise", "aten::mul": "elementwise",
        "my_new_fused_megakernel": "other", "detach_": "other", "": "other",
    }
    got = {name: group_of(name) for name in cases}
    assert got == cases
    assert set(cases.values()) <= set(GROUP_NAMES) and GROUP_NAMES[-1] == "other"


def _raw(decode_ms: float = 0.02) -> dict:
    decode = [{"name": "_attention_decode_kernel", "ms": decode_ms, "calls": 2},
              {"name": "_attention_decode_kernel", "ms": decode_ms, "calls": 2},  # a name may come twice: summed
              {"name": "nvfp4_gemv_kernel", "ms": 0.5, "calls": 8}, {"name": "my_new_fused_megakernel", "ms": 0.125, "calls": 1}]
    prefill = [{"name": "_gdn_prefill_kernel", "ms": 3.0, "calls": 6}, {"name": "nvjet_sm90_tst", "ms": 1.5, "calls": 9}]
    return {"device": "cuda:0", "phases": {
        "decode": {"kernels": decode, "wall_ms": 2.0, "steps": 1, "tokens": 1, "batch": 1, "context": 16},
        "prefill": {"kernels": prefill, "wall_ms": 9.0, "steps": 1, "tokens": 16, "batch": 1, "context": 0}}}


def test_roofline_fraction_only_where_roofline_separates_the_ops_traffic(tiny_checkpoint):
    from metainfer.checkpoint import CheckpointReader

    text = CheckpointReader(tiny_checkpoint("bf16")).text_config
    h200 = get_gpu("h200")
    res = summarize(_raw(), text, "bf16", h200).to_json()
    dec = {o["op"]: o for o in res["phases"]["decode"]["ops"]}
    assert [o["op"] for o in res["phases"]["decode"]["ops"]] == ["nvfp4_gemm", "other", "attention"]  # largest first
    cost = roofline.decode_step(text, get_quant("bf16"), batch=1, context=16)
    assert dec["attention"]["ms"] == pytest.approx(0.04) and dec["attention"]["calls"] == 4 and dec["attention"]["kernels"] == 1
    assert dec["attention"]["roofline_fraction"] == pytest.approx(cost.kv_bytes / (h200.mem_bw_gbs * 1e9) * 1e3 / 0.04)
    assert dec["attention"]["roofline_basis"] == "kv_bytes"
    assert dec["nvfp4_gemm"]["roofline_fraction"] is None and dec["other"]["roofline_fraction"] is None
    phase = res["phases"]["decode"]
    assert phase["total_ms"] == pytest.approx(0.665) and phase["kernel_calls"] == 13
    assert phase["roofline_fraction"] == pytest.approx(cost.seconds(h200) * 1e3 / 0.665)
    assert phase["matmul"]["ms"] == pytest.approx(0.5)  # nvfp4_gemm alone: the unknown kernel is not counted
    assert phase["matmul"]["roofline_fraction"] == pytest.approx(cost.weight_bytes / (h200.mem_bw_gbs * 1e9) * 1e3 / 0.5)
    pre = res["phases"]["prefill"]
    assert all(o["roofline_fraction"] is None for o in pre["ops"])  # roofline.py sums prefill FLOPs over all ops
    assert pre["roofline_fraction"] == pytest.approx(roofline.prefill(text, get_quant("bf16"), 16).seconds(h200) * 1e3 / 4.5)
    on_cpu = summarize({**_raw(), "device": "cpu"}, text, "bf16", h200).to_json()
    assert on_cpu["phases"]["decode"]["roofline_fraction"] is None and on_cpu["phases"]["decode"]["matmul"] is None
    assert all(o["roofline_fraction"] is None for p in on_cpu["phases"].values() for o in p["ops"])
    with pytest.raises(ProfileError, match="non-negative"):
        summarize(_raw(decode_ms=float("nan")), text, "bf16", h200)
    with pytest.raises(ProfileError, match="lacks phase"):
        summarize({"device": "cpu", "phases": {"decode": _raw()["phases"]["decode"]}}, text, "bf16", h200)


def test_profile_runs_by_default_on_a_gpu_only(rendered, tiny_checkpoint, tmp_path):
    assert "profile" in default_stages("h200") and "profile" not in default_stages("cpu")
    base = ["--engine", str(rendered), "--checkpoint", str(tiny_checkpoint("bf16")), "--gpu", "cpu", "--json", str(tmp_path / "g.json")]
    assert parse_args(base).stages == ("static", "parity", "bench")
    assert parse_args(base + ["--stages", "profile,static"]).stages == ("static", "profile")


def test_profile_stage_in_a_worker_and_its_report(rendered, tiny_checkpoint, tmp_path):
    out = tmp_path / "gate.json"
    res = _gate(rendered, tiny_checkpoint("bf16"), out)
    gate = json.loads(out.read_text())
    assert res.ok and [s.name for s in res.stages] == ["profile"], gate.get("profile")
    prof = gate["profile"]
    assert prof["ok"] and prof["device"] == "cpu" and set(prof["phases"]) == {"decode", "prefill"}
    for phase, body in prof["phases"].items():
        assert body["ops"], phase
        for o in body["ops"]:
            assert math.isfinite(o["ms"]) and o["ms"] > 0 and o["calls"] >= 1 and o["op"] in GROUP_NAMES, (phase, o)
            assert o["roofline_fraction"] is None
        assert body["roofline_fraction"] is None and body["total_ms"] == pytest.approx(sum(o["ms"] for o in body["ops"]))
    assert prof["phases"]["decode"]["batch"] == 2 and prof["phases"]["prefill"]["tokens"] == 16
    assert {"gemm", "attention"} <= {o["op"] for o in prof["phases"]["prefill"]["ops"]}

    from metainfer.build.decision import figures
    from metainfer.build.records import RunRecord, write_json

    rec = RunRecord.create(tmp_path / "runs", "tiny-bf16-cpu", {"agent": "offline", "seed": 0, "branch": "b", "iterations": 1})
    d = rec.iter_dir(0)
    write_json(d / "gate.json", gate)
    write_json(d / "report.json", {"iteration": 0, "accepted": True, "summary": "baseline", "reason": "ok",
                                   "figures": figures(gate), "cumulative_speedup": 1.0, "gate": {"ok": True, "seconds": 1.0}})
    proc = subprocess.run([sys.executable, "-m", "metainfer.cli", "report", str(rec.path)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = (d / "report.html").read_text().split('id="profile"')[1].split("</table>")[0]
    top = max(prof["phases"]["decode"]["ops"], key=lambda o: o["ms"])["op"]
    assert f"<code>{top}</code>" in rows and "n/a (CPU)" in rows and (d / "profile.png").read_bytes()[:4] == b"\x89PNG"


BROKEN = {
    "fail": '''
def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    raise RuntimeError("this engine cannot be profiled")
''',
    "timeout": '''
_honest_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    """Load honestly; every decode step then hangs."""
    import time

    eng = _honest_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)

    def decode(slots, tokens):
        time.sleep(3600)

    eng.decode = decode
    return eng
'''}


@pytest.mark.parametrize("verdict", ["fail", "timeout"])
def test_a_failed_profile_is_recorded_and_the_gate_stays_green(rendered, tiny_checkpoint, tmp_path, capsys, verdict):
    import shutil
    import time

    broken = tmp_path / "broken" / rendered.name
    shutil.copytree(rendered, broken)
    append(broken, "engine/__init__.py", BROKEN[verdict])
    out = tmp_path / "gate.json"
    t = time.monotonic()
    if verdict == "fail":  # through the command line: exit 0, and the failure printed
        argv = ["--engine", str(broken), "--checkpoint", str(tiny_checkpoint("bf16")), "--gpu", "cpu", "--stages", "profile",
                "--seed", "11", "--json", str(out)]
        assert main(argv) == 0
        assert "profile failed, not gating: fail" in capsys.readouterr().out
    else:
        assert _gate(broken, tiny_checkpoint("bf16"), out, timeout=20).ok
    seconds = time.monotonic() - t
    gate = json.loads(out.read_text())
    assert gate["ok"] and gate["verdict"] == "pass" and gate["stages"] == []
    prof = gate["profile"]
    assert prof["ok"] is False and prof["verdict"] == verdict and prof["phases"] == {}, prof
    if verdict == "fail":
        assert "this engine cannot be profiled" in prof["error"]
    else:  # the stage's own limit, not the 120 s call limit, stopped the hung worker
        assert 20 <= prof["seconds"] < 60 and seconds < 90, (prof["seconds"], seconds)


def test_capture_reads_kernel_spans_on_a_gpu_and_cpu_self_time_on_the_cpu():
    """The worker side's event reading, on torch's own event objects: a GPU run sums kernels' device spans (async
    ones too) and ignores the CPU ops that launched them; a CPU run sums operators' self time."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from harness.profile_capture import _kernels

    def ev(name, start, end, device, is_async=False):
        return FunctionEvent(id=1, name=name, thread=0, start_us=start, end_us=end, use_device="cuda", device_type=device,
                             is_async=is_async)

    events = [ev("aten::mm", 0, 50, DeviceType.CPU), ev("nvjet_sm90_tst", 10, 30, DeviceType.CUDA),
              ev("nvjet_sm90_tst", 40, 45, DeviceType.CUDA, is_async=True), ev("Memcpy HtoD", 50, 51.5, DeviceType.CUDA)]
    prof = SimpleNamespace(events=lambda: events)
    assert _kernels(prof, cuda=True) == [{"name": "nvjet_sm90_tst", "ms": pytest.approx(0.025), "calls": 2},
                                         {"name": "Memcpy HtoD", "ms": pytest.approx(0.0015), "calls": 1}]
    assert _kernels(prof, cuda=False) == [{"name": "aten::mm", "ms": pytest.approx(0.05), "calls": 1}]

"""Where one batch-1 decode step of the engine spends its time, kernel by kernel, on the GPU.

Loads the engine, prefills one 256-token prompt, then:
- times 64 decode steps as the engine runs them (CUDA graphs if its tunables capture them),
  median step time → tok/s;
- profiles 8 eager steps (graphs bypassed) with torch.profiler (CUPTI): per kernel name its
  launches per step and GPU µs per step; per bf16 matmul (aten::mm / aten::linear, by shape)
  the bytes its operands move and the achieved GB/s. The NVFP4 kernels' bytes follow from
  the model dims (ENGINE.md, kernels/README.md): reported by ``weight_bytes_per_step``.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch


def _weight_bytes(dims) -> dict:
    """Bytes the decode step at batch 1 must read for weights, by category (DESIGN.md roofline)."""
    h, i, si = dims.hidden_size, dims.moe_intermediate_size, dims.shared_expert_intermediate_size
    k, e = dims.num_experts_per_tok, dims.num_experts
    fp4 = 0.5 + 1 / 16  # packed nibble + one e4m3 scale per 16
    n_lin = len(dims.linear_attention_layers)
    n_full = len(dims.full_attention_layers)
    gdn = h * (2 * dims.key_dim + dims.value_dim + dims.value_dim + 2 * dims.linear_num_value_heads) + dims.value_dim * h
    attn = h * (2 * dims.num_attention_heads * dims.head_dim + 2 * dims.num_key_value_heads * dims.head_dim) + dims.num_attention_heads * dims.head_dim * h
    layers = n_lin + n_full
    return {
        "routed_experts_nvfp4": layers * k * 3 * h * i * fp4,
        "shared_expert_nvfp4": layers * 3 * h * si * fp4,
        "router_bf16": layers * (e * h + h) * 2,
        "gdn_projections_bf16": n_lin * gdn * 2,
        "attention_projections_bf16": n_full * attn * 2,
        "gdn_state_fp32_rw": n_lin * 2 * dims.linear_num_value_heads * dims.linear_key_head_dim * dims.linear_value_head_dim * 4,
        "lm_head_bf16": dims.vocab_size * h * 2,
    }


def profile_decode(engine_dir: Path, ckpt: str, out: Path, prompt_len: int = 256, device: str = "cuda") -> dict:
    """Run the measurement; write ``profile_kernels.txt`` under ``out`` and return the summary dict."""
    from torch.profiler import ProfilerActivity, profile

    from harness.engine_loader import import_engine

    mod = import_engine(engine_dir)
    engine = mod.load(ckpt, device=device, max_batch=4, max_seq_len=prompt_len + 200)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    vocab = engine.dims.vocab_size
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, vocab - 100, (prompt_len,), generator=g).tolist()
    slots = engine.prefill([prompt]).slots
    tok = 17
    for _ in range(8):  # warm-up (compiles, graph replays)
        engine.decode(slots, [tok])

    def step_times(n: int) -> list[float]:
        out = []
        for _ in range(n):
            sync()
            t = time.perf_counter()
            engine.decode(slots, [tok])
            sync()
            out.append(time.perf_counter() - t)
        return out

    times = step_times(64)
    graphs, engine.graphs = getattr(engine, "graphs", None), None
    eager = step_times(8)
    steps = 8
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            engine.decode(slots, [tok])
        sync()
    engine.graphs = graphs
    kernels: dict[str, list[float]] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA or (device == "cpu" and ev.name.startswith("aten::")):
            kernels.setdefault(ev.name, []).append(ev.device_time)
    rows = sorted(((n, len(v) / steps, sum(v) / steps) for n, v in kernels.items()), key=lambda r: -r[2])
    total_us = sum(r[2] for r in rows) or float("nan")  # CPU runs record no device time
    mm_rows = []
    for avg in prof.key_averages(group_by_input_shape=True):
        if avg.key in ("aten::mm", "aten::addmm", "aten::linear", "aten::matmul") and avg.input_shapes and avg.device_time_total > 0:
            shapes = [s for s in avg.input_shapes if s]
            nbytes = sum(2 * int(torch.tensor(s).prod()) for s in shapes[:2])  # bf16 operands
            per_call_us = avg.device_time_total / avg.count
            mm_rows.append({"op": avg.key, "shapes": shapes[:2], "calls_per_step": avg.count / steps,
                            "us_per_call": per_call_us, "bytes_per_call": nbytes, "gb_per_s": nbytes / per_call_us / 1e3})
    lines = [f"{'kernel':<90} {'calls/step':>10} {'us/step':>10} {'share':>7}"]
    lines += [f"{n[:90]:<90} {c:>10.1f} {us:>10.1f} {us / total_us:>7.1%}" for n, c, us in rows]
    lines += ["", "bf16 matmuls by shape (operand bytes assume bf16):"]
    lines += [json.dumps(r) for r in sorted(mm_rows, key=lambda r: -r["us_per_call"] * r["calls_per_step"])]
    (out / "profile_kernels.txt").write_text("\n".join(lines) + "\n")
    weights = _weight_bytes(engine.dims)
    step_s = statistics.median(times)
    return {
        "decode_step_ms_as_run": step_s * 1e3, "decode_tok_s_as_run": 1 / step_s, "graphs": graphs is not None,
        "decode_step_ms_eager": statistics.median(eager) * 1e3,
        "gpu_kernel_us_per_step_eager": total_us, "kernel_launches_per_step": sum(r[1] for r in rows),
        "weight_bytes_per_step": weights, "weight_gb_per_step": sum(weights.values()) / 1e9,
        "achieved_gb_s_as_run": sum(weights.values()) / step_s / 1e9,
        "top_kernels": [{"name": n[:120], "calls_per_step": c, "us_per_step": us} for n, c, us in rows[:25]],
        "bf16_matmuls": mm_rows,
    }

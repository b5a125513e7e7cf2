"""Prefill on the H200: per-op microbenchmarks of engine/ops/ and TTFT of the whole engine (issue 11).

Steps (``--steps``, comma list, in this order; each writes ``<out>/prefill_<step>.json``):
- ``ops``: at the real shapes, median ms (``triton.testing.do_bench``) of
  - ``gdn_chunk`` (one layer, one 8,192-token sequence; flash-linear-attention publishes ~0.47 ms
    on an H200) over a small launch-config sweep, beside the torch chunked path and the recurrent
    Triton prefill it replaces, and ``dot_precision="ieee"``;
  - ``attention_prefill`` (one 16,384-token causal sequence, 16 q / 2 kv heads, head_dim 256) over
    a block/warp/stage sweep, as TFLOP/s (causal: 2·HQ·D·T² FLOPs) and % of 790 TFLOP/s, beside
    torch SDPA (is_causal, kv heads repeated);
  - ``conv1d_prefill`` (8,192 tokens × 8,192 channels) beside the serial kernel, as GB/s.
  Needs no checkpoint (the template's ops, random inputs).
- ``checkpoint``: the synthetic full-size NVFP4 checkpoint into ``--ckpt`` (as full_run.py; skipped
  when present). Writing it takes minutes: give it its own device call if needed.
- ``ttft``: the rendered engine on ``--ckpt``: TTFT (``generate``, max_tokens 1, median of
  ``--rounds`` after a warm-up) at 256 / 2,048 / 8,192 tokens with the prefill ops on ("ops"; prompts
  in pieces of ``prefill_chunk_tokens``), on with each prompt in one forward ("ops-1fw") and off
  ("torch"; tunables ``*_prefill_ops`` 1 / 0, swapped on the loaded engine), kernels and memcpys of one
  256-token prefill forward (torch.profiler), and whether that forward is free of host syncs
  (``torch.cuda.set_sync_debug_mode("error")``).

One command on the device (results and a table under $OUT):
``source scripts/h200/env.sh && python3 scripts/h200/prefill_bench.py --steps ops,checkpoint,ttft --out $OUT``
Dry run on a CPU: ``TRITON_INTERPRET=1 python3 scripts/h200/prefill_bench.py --device cpu --model
qwen3.6-35b-a3b-tiny --gdn-tokens 64 --attn-tokens 64 --lengths 8,70 --rounds 1 --quick --ckpt /tmp/tiny_ckpt``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
PEAK_BF16_TFLOPS, FLA_GDN_MS = 790.0, 0.47
OPS_OFF = {"gdn_prefill_ops": 0, "attention_prefill_ops": 0, "conv1d_prefill_ops": 0}


def _bench(fn) -> float:
    """Median ms on CUDA (do_bench); one timed call elsewhere (a dry run under the interpreter)."""
    if not torch.cuda.is_available():
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=50))


def _ops_module(name: str):
    from test_ops_prefill_common import load_op  # the template's ops, NaN-poisoned scratch off below

    mod = load_op(name)
    importlib.import_module("_engine_prefill_under_test.kernels._common").POISON_ALLOCATIONS = False
    return mod


def step_ops(args) -> dict:
    from test_ops_prefill_attention import attn_inputs
    from test_ops_prefill_conv1d import conv_inputs
    from test_ops_prefill_gdn import gdn_inputs

    gdn, attn, conv = _ops_module("gdn_chunk"), _ops_module("attention_prefill"), _ops_module("conv1d_prefill")
    kern = importlib.import_module("_engine_prefill_under_test.kernels")
    out: dict = {}
    t = args.gdn_tokens
    d = gdn_inputs([t], 16, 32, 128, 128, seed=0, device=args.device)
    x = [d[n] for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias")]
    st, cu, sl = d["state"], d["cu"], d["slots"]
    rows = []
    for cfg in ({},) if args.quick else ({}, {"state_block_v": 16}, {"state_block_v": 64}, {"state_num_warps": 4, "state_num_stages": 3},
                                         {"block_v": 64, "num_warps": 8}, {"block_v": 64, "num_warps": 4}, {"prep_num_warps": 4},
                                         {"prep_num_warps": 16}, {"dot_precision": "tf32x3"}, {"dot_precision": "ieee"}):
        try:
            ms = _bench(lambda: gdn.gdn_chunk_prefill(*x, st, cu, sl, **cfg))
            rows.append({"config": cfg, "ms": ms, "tok_s": t / ms * 1e3, "x_fla": ms / FLA_GDN_MS})
        except Exception as err:  # a config the GPU cannot compile is reported, not fatal
            rows.append({"config": cfg, "error": f"{type(err).__name__}: {err}"[:300]})
    g = -x[5].exp() * torch.nn.functional.softplus(x[3].float() + x[6])
    beta = torch.sigmoid(x[4].float())
    base = {"torch_chunk_ms": _bench(lambda: kern.gdn_chunk_prefill(x[0], x[1], x[2], g, beta, st, cu, sl)),
            "recurrent_triton_ms": _bench(lambda: kern.gdn_recurrent_prefill(x[0], x[1], x[2], g, beta, st, cu, sl))}
    out["gdn_chunk"] = {"tokens": t, "fla_h200_ms": FLA_GDN_MS, "configs": rows, **base}
    del d, x, g, beta
    t = args.attn_tokens
    a = attn_inputs([t], [0], 16, 2, 256, max_len=t, seed=0, device=args.device)
    args_a = (a["q"], a["kc"], a["vc"], a["gate"], a["cu"], a["positions"], a["slots"], 256**-0.5)
    flops = 2 * 16 * 256 * t * t  # causal: half of 4·HQ·D·T²
    rows = []
    for bm, bn, nw, ns in ((64, 64, 8, 2),) if args.quick else ((64, 64, 8, 2), (64, 32, 8, 2), (128, 32, 8, 2), (128, 64, 8, 2), (64, 64, 4, 2),
                           (64, 32, 4, 3), (128, 64, 8, 3), (64, 64, 8, 1)):
        cfg = {"block_m": bm, "block_n": bn, "num_warps": nw, "num_stages": ns}
        try:
            ms = _bench(lambda: attn.attention_prefill(*args_a, **cfg))
            rows.append({"config": cfg, "ms": ms, "tflops": flops / ms / 1e9, "pct_peak": 100 * flops / ms / 1e9 / PEAK_BF16_TFLOPS})
        except Exception as err:
            rows.append({"config": cfg, "error": f"{type(err).__name__}: {err}"[:300]})
    q4 = a["q"].transpose(0, 1)[None]
    # kv heads repeated so that torch can take its flash backend (it has no GQA there)
    k4, v4 = (c[0].transpose(0, 1)[None].repeat_interleave(8, dim=1) for c in (a["kc"], a["vc"]))
    try:
        sdpa = _bench(lambda: torch.nn.functional.scaled_dot_product_attention(q4, k4, v4, is_causal=True))
    except RuntimeError as err:
        sdpa = f"{err}"[:200]
    out["attention_prefill"] = {"tokens": t, "flops": flops, "configs": rows, "sdpa_causal_ms": sdpa}
    del a, args_a, q4, k4, v4
    t = args.gdn_tokens
    xc, w, cs, cuc, slc = conv_inputs([t], c=8192, seed=0, device=args.device)
    nbytes = t * 8192 * 4
    rows = []
    for bt, bc in ((64, 256),) if args.quick else ((64, 256), (32, 256), (128, 256), (64, 128), (64, 512), (16, 512)):
        ms = _bench(lambda: conv.causal_conv1d_prefill(xc, cs, w, cuc, slc, block_t=bt, block_c=bc))
        rows.append({"config": {"block_t": bt, "block_c": bc}, "ms": ms, "gb_s": nbytes / ms / 1e6})
    serial = _bench(lambda: kern.causal_conv1d_prefill(xc.contiguous(), cs, w, cuc, slc))
    out["conv1d_prefill"] = {"tokens": t, "channels": 8192, "configs": rows, "serial_kernel_ms": serial}
    return out


def step_checkpoint(args) -> dict:
    from metainfer.checkpoint import write_checkpoint
    from metainfer.targets import get_model, get_quant

    ckpt = Path(args.ckpt)
    if (ckpt / "config.json").is_file() and (ckpt / "model.safetensors.index.json").is_file():
        return {"skipped": "complete checkpoint present", "path": str(ckpt)}
    t = time.perf_counter()
    write_checkpoint(get_model(args.model), get_quant("nvfp4"), ckpt, args.seed, force=True, progress=False)
    return {"seconds": time.perf_counter() - t, "path": str(ckpt)}


def _set_tunables(engine, **values) -> None:
    tun = dataclasses.replace(engine.tunables, **values)
    engine.tunables = engine.model.tunables = tun


def _count_kernels(engine, mod, n: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    make_batch = importlib.import_module(f"{mod.__name__}.batch").make_batch
    res: dict = {}
    for i in range(2):  # warm, then measure
        slot = engine.cache.allocate(1)
        batch = make_batch([list(range(1, n + 1))], slot, [0], engine.device)
        torch.cuda.synchronize()
        if i == 0:
            torch.cuda.set_sync_debug_mode("error")
            try:
                engine.model.forward(batch, engine.cache)
                res["sync_free"] = True
            except RuntimeError as err:
                res["sync_free"], res["sync_error"] = False, str(err)[:300]
            finally:
                torch.cuda.set_sync_debug_mode("default")
        else:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                engine.model.forward(batch, engine.cache)
                torch.cuda.synchronize()
            names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            res["kernels"] = sum(1 for k in names if not k.startswith(("Memcpy", "Memset")))
            res["memcpy_memset"] = len(names) - res["kernels"]
        engine.cache.release(slot)
    return res


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def step_ttft(args) -> dict:
    from harness.engine_loader import import_engine
    from metainfer.render import render_engine
    from metainfer.targets import make_target

    gen = render_engine(make_target(args.model, "nvfp4", "h200"), args.gen, force=True)
    mod = import_engine(gen)
    lengths = [int(n) for n in args.lengths.split(",")]
    engine = mod.load(args.ckpt, device=args.device, max_batch=2, max_seq_len=max(lengths) + 8)
    on = {k: 1 for k in OPS_OFF}
    gen_t = torch.Generator().manual_seed(args.seed)
    out: dict = {"lengths": lengths, "prefill_chunk_tokens": engine.tunables.prefill_chunk_tokens, "rows": []}
    one_pass = {**on, "prefill_chunk_tokens": max(lengths)}  # the whole prompt in one forward
    for label, values in (("ops", on), ("ops-1fw", one_pass), ("torch", OPS_OFF)):
        _set_tunables(engine, **values)
        counts = _count_kernels(engine, mod, 256) if args.device == "cuda" and label != "ops-1fw" else {}
        row = {"path": label, **counts}
        for n in lengths:
            prompt = torch.randint(0, 1000, (n,), generator=gen_t).tolist()
            params = mod.SamplingParams(max_tokens=1, ignore_eos=True)
            engine.generate([prompt], params)  # warm (compiles for this shape)
            times = []
            for _ in range(args.rounds):
                _sync(args.device)
                t0 = time.perf_counter()
                engine.generate([prompt], params)
                _sync(args.device)
                times.append((time.perf_counter() - t0) * 1e3)
            row[f"ttft_ms_{n}"] = statistics.median(times)
            row[f"prompt_tok_s_{n}"] = n / statistics.median(times) * 1e3
        out["rows"].append(row)
    return out


STEPS = {"ops": step_ops, "checkpoint": step_checkpoint, "ttft": step_ttft}


def _table(name: str, res: dict) -> str:
    lines = [f"== {name}"]
    if name == "ops" and res.get("ok"):
        g = res["gdn_chunk"]
        lines.append(f"gdn_chunk {g['tokens']} tok: torch {g['torch_chunk_ms']:.3f} ms, recurrent {g['recurrent_triton_ms']:.3f} ms "
                     f"(FLA {g['fla_h200_ms']} ms)")
        lines += [f"  {r['config']}: " + (f"{r['ms']:.3f} ms  {r['tok_s']:,.0f} tok/s  {r['x_fla']:.2f}x FLA" if "ms" in r else r["error"])
                  for r in g["configs"]]
        a = res["attention_prefill"]
        sdpa = a["sdpa_causal_ms"]
        lines.append(f"attention_prefill {a['tokens']} tok causal: torch SDPA " + (f"{sdpa:.3f} ms" if isinstance(sdpa, float) else sdpa))
        lines += [f"  {r['config']}: " + (f"{r['ms']:.3f} ms  {r['tflops']:.0f} TFLOP/s  {r['pct_peak']:.1f}% of peak" if "ms" in r
                                          else r["error"]) for r in a["configs"]]
        c = res["conv1d_prefill"]
        lines.append(f"conv1d_prefill {c['tokens']} tok x {c['channels']}: serial kernel {c['serial_kernel_ms']:.3f} ms")
        lines += [f"  {r['config']}: {r['ms']:.3f} ms  {r['gb_s']:.0f} GB/s" for r in c["configs"]]
    elif name == "ttft" and res.get("ok"):
        for r in res["rows"]:
            ttft = "  ".join(f"{n}: {r[f'ttft_ms_{n}']:.1f} ms ({r[f'prompt_tok_s_{n}']:,.0f} tok/s)" for n in res["lengths"])
            lines.append(f"{r['path']:>7}: {ttft}  | 256-tok forward: {r.get('kernels')} kernels, "
                         f"{r.get('memcpy_memset')} memcpy/memset, sync-free {r.get('sync_free')}")
    else:
        lines.append(json.dumps({k: v for k, v in res.items() if k != "traceback"}, default=str)[:1500])
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="ops,checkpoint,ttft")
    p.add_argument("--out", default="/tmp/out")
    p.add_argument("--ckpt", default="/tmp/ckpt")
    p.add_argument("--gen", default="/tmp/gen_prefill")
    p.add_argument("--model", default="qwen3.6-35b-a3b")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--lengths", default="256,2048,8192")
    p.add_argument("--gdn-tokens", type=int, default=8192)
    p.add_argument("--attn-tokens", type=int, default=16384)
    p.add_argument("--quick", action="store_true", help="one launch config per op (no sweep)")
    p.add_argument("--device", default="cuda", help="cpu: a dry run (ops under TRITON_INTERPRET=1, tiny sizes)")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.steps.split(","):
        t = time.perf_counter()
        try:
            res = {"ok": True, **STEPS[name](args)}
        except Exception as err:  # one step's failure must not lose the other steps' figures
            res, failed = {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}, True
        res["wall_s"] = time.perf_counter() - t
        (Path(args.out) / f"prefill_{name}.json").write_text(json.dumps(res, indent=2, default=str) + "\n")
        print(_table(name, res), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

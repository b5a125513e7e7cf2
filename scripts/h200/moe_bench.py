"""MoE microbenchmark on the H200 (issue 12): the new op ``ops/moe_fused.moe_w4a16`` against the
current ``kernels.moe_nvfp4``, at the real shapes, with random NVFP4 weights (no checkpoint).

    python scripts/h200/moe_bench.py [--tokens 1 32 64 2048 8192] [--sweep]
    MOE_ENGINE_DIR=/path/to/engine python scripts/h200/moe_bench.py ...   # another copy of the engine's ops

Per layer: H = 2048, I = 512, 256 routed experts + the shared one stacked as expert 256, k = 9 pairs
per token (8 routed, uniform routing, + the shared expert), timed inside a CUDA graph
(``triton.testing.do_bench_cudagraph``, median). For each T it prints µs, the bytes of the distinct
experts hit (what must be read once), the fraction of 4.8 TB/s those bytes need at that time, the
fraction of the bf16 dense peak (989 TFLOP/s spec; ~790 measured) the FLOPs need, the issue's
target, and the relative difference new vs old output. ``--sweep`` also times a grid of launch
configurations per T (``MoeBucket`` fields) and reports the best, as tunables to write.
Writes ``$OUT/moe_bench.json`` (or ./moe_bench.json) and prints a table.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import os
import sys
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
#: the engine whose ops are timed: the template, or another copy of it (MOE_ENGINE_DIR, e.g. main's beside a branch's,
#: to time both in one device call)
ENGINE_DIR = Path(os.environ.get("MOE_ENGINE_DIR") or ROOT / "templates/engine/qwen3_5_moe/engine")
PKG = "_engine_moe_bench"
H, I, E, TOPK = 2048, 512, 256, 8
BW = 4.8e12
PEAK = 989e12
TARGET_US = {1: 8, 32: 100, 64: 140, 2048: 350, 8192: 1100}


def load(name: str):
    """``engine/<name>`` of the template inside a stand-in package (its __init__ needs a rendered target)."""
    if PKG not in sys.modules:
        pkg = types.ModuleType(PKG)
        pkg.__path__ = [str(ENGINE_DIR)]
        sys.modules[PKG] = pkg
    return importlib.import_module(f"{PKG}.{name}")


def random_experts(n_exp: int, seed: int):
    """Checkpoint-layout NVFP4 experts with valid random codes and e4m3 scales (quantizing 257 real
    matrices takes longer than the benchmark)."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def nvfp4(n, k):
        w = torch.randint(0, 256, (n_exp, n, k // 2), dtype=torch.uint8, device="cuda", generator=g)
        s = (torch.rand(n_exp, n, k // 16, device="cuda", generator=g) * 2 + 0.25).to(torch.float8_e4m3fn)
        return w, s

    w13, s13 = nvfp4(2 * I, H)
    w2, s2 = nvfp4(H, I)
    g13 = torch.rand(n_exp, 2, device="cuda", generator=g) * 0.01 + 0.001
    g2 = torch.rand(n_exp, device="cuda", generator=g) * 0.01 + 0.001
    return w13, s13, g13, w2, s2, g2


def routing(t: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.rand(t, E, device="cuda", generator=g).topk(TOPK, dim=-1).indices  # uniform, distinct
    w = torch.rand(t, TOPK, device="cuda", generator=g) + 0.1
    w = w / w.sum(-1, keepdim=True)
    shared_w = torch.sigmoid(torch.randn(t, 1, device="cuda", generator=g))
    ids = torch.cat([ids, torch.full((t, 1), E, device="cuda", dtype=ids.dtype)], 1)
    return ids, torch.cat([w, shared_w], 1).float()


def bench(fn) -> float:
    import triton.testing

    return triton.testing.do_bench_cudagraph(fn, rep=200) * 1e3  # µs


def sweep_space(t: int):
    """Candidate bucket configurations for T tokens (the bucket the op would pick is forced)."""
    if t <= 16:  # block_m, block_n, down_block_n, split_k, num_warps, num_stages
        grid = itertools.product([16], [16, 32, 64], [16, 32], [1, 4], [8], [2])
    elif t <= 128:
        grid = itertools.product([16], [32, 64, 128], [32, 64, 128], [1, 2], [4, 8], [2])
    else:
        grid = itertools.product([64, 128], [64, 128], [64, 128], [1], [4, 8], [2])
    b = "s" if t <= 16 else "m" if t <= 128 else "l"
    for bm, bn, dbn, sk, nw, ns in grid:
        cfg = {f"{b}_block_m": bm, f"{b}_block_n": bn, f"{b}_down_block_n": dbn, f"{b}_split_k": sk,
               f"{b}_num_warps": nw, f"{b}_num_stages": ns}
        yield {"s_max_t": t, **cfg} if b == "s" else cfg  # the s bucket serves T = 1 by default: widen it to T


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 32, 64, 2048, 8192])
    ap.add_argument("--sweep", action="store_true", help="also time a grid of launch configurations per T")
    ap.add_argument("--no-old", action="store_true", help="skip the current kernels (kernels.moe_nvfp4)")
    ap.add_argument("--sweep-budget-s", type=float, default=None,
                    help="stop sweeping a T after this many seconds (what was timed is kept)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("moe_bench needs CUDA (run it on the H200)")
    kernels = load("kernels")
    fused, pack = load("ops.moe_fused"), load("ops.moe_pack")
    ex = random_experts(E + 1, seed=0)
    pk = pack.pack_experts(*ex)
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in
               zip(pack.unpack_experts(pk)[:2], ex[:2])), "repack is not exact"
    per_expert = (2 * I * H + H * I) // 2 + (2 * I * H + H * I) // 16  # code + scale bytes
    rows, sweeps = [], {}
    for t in args.tokens:
        x = torch.randn(t, H, device="cuda").bfloat16()
        ids, tw = routing(t, seed=t)
        hit = int(torch.unique(ids).numel())
        nbytes = hit * per_expert + t * H * 2 * 2
        flops = 2 * t * (TOPK + 1) * (2 * I * H + H * I)
        new = fused.moe_w4a16_triton(x, ids, tw, pk)
        row = {"tokens": t, "experts_hit": hit, "mbytes": round(nbytes / 1e6, 1), "target_us": TARGET_US.get(t)}
        row["new_us"] = round(bench(lambda: fused.moe_w4a16_triton(x, ids, tw, pk)), 1)
        if not args.no_old:
            old = kernels.moe_nvfp4(x, ids, tw, *ex)
            row["old_us"] = round(bench(lambda: kernels.moe_nvfp4(x, ids, tw, *ex)), 1)
            row["rel_diff_new_old"] = float(((new.float() - old.float()).norm() / old.float().norm()).item())
        row["new_of_4.8TBps"] = round(nbytes / (row["new_us"] * 1e-6) / BW, 3)
        row["new_of_bf16_peak"] = round(flops / (row["new_us"] * 1e-6) / PEAK, 3)
        row["meets_target"] = row["target_us"] is None or row["new_us"] <= row["target_us"]
        row["finite"] = bool(torch.isfinite(new).all())
        if args.sweep:
            best, t0 = None, time.monotonic()
            for cfg in sweep_space(t):
                if args.sweep_budget_s is not None and time.monotonic() - t0 > args.sweep_budget_s:
                    print(f"  T={t}: sweep budget of {args.sweep_budget_s:.0f} s spent", flush=True)
                    break
                try:
                    us = bench(lambda: fused.moe_w4a16_triton(x, ids, tw, pk, **cfg))
                except Exception as err:  # a configuration that does not compile or fit: report, go on
                    print(f"  T={t} {cfg}: {type(err).__name__}: {str(err)[:120]}", flush=True)
                    continue
                print(f"  T={t} {cfg}: {us:.1f} us", flush=True)
                if best is None or us < best[0]:
                    best = (us, cfg)
            if best is not None:
                sweeps[t] = {"us": round(best[0], 1), "launch": best[1]}
                row["best_sweep_us"] = round(best[0], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        write(rows, sweeps)  # after every T, so a timeout keeps what was measured
    cols = ["tokens", "experts_hit", "mbytes", "old_us", "new_us", "best_sweep_us", "target_us",
            "new_of_4.8TBps", "new_of_bf16_peak", "meets_target", "rel_diff_new_old"]
    print("\n" + " | ".join(cols))
    for r in rows:
        print(" | ".join(str(r.get(c, "")) for c in cols))
    print(f"\nwrote {write(rows, sweeps)}")


def write(rows: list[dict], sweeps: dict) -> Path:
    """``$OUT/moe_bench.json`` (or ./moe_bench.json) with the rows so far."""
    out = Path(os.environ.get("OUT", ".")) / "moe_bench.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                               "rows": rows, "sweep_best": sweeps}, indent=2))
    return out


if __name__ == "__main__":
    main()

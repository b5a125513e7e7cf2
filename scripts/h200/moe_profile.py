"""Where the MoE op's time goes at one T (issue 12): per-kernel CUDA time of ``ops/moe_fused.moe_w4a16`` from
torch.profiler over eager calls, at the real shapes with moe_bench.py's random experts and uniform routing.

    python3 scripts/h200/moe_profile.py --tokens 32 [--iters 50]
    ncu --clock-control none --section SpeedOfLight --section WarpStateStats -k regex:_moe_gemm \
        --launch-skip 20 --launch-count 2 python3 scripts/h200/moe_profile.py --tokens 32 --iters 12

Prints one line per kernel: total µs per call and its share; writes $OUT/moe_profile_<T>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from moe_bench import E, load, random_experts, routing  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--iters", type=int, default=50)
    a = ap.parse_args()
    fused, pack = load("ops.moe_fused"), load("ops.moe_pack")
    pk = pack.pack_experts(*random_experts(E + 1, 0))
    ids, w = routing(a.tokens, 1)
    x = torch.randn(a.tokens, pk.hidden, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        fused.moe_w4a16(x, ids, w, pk)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.iters):
            fused.moe_w4a16(x, ids, w, pk)
        torch.cuda.synchronize()
    rows = {}
    for ev in prof.key_averages():
        t = getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0)
        if t > 0:
            rows[ev.key] = t / a.iters
    total = sum(rows.values())
    for k, v in sorted(rows.items(), key=lambda kv: -kv[1]):
        print(f"T={a.tokens} {v:8.1f} us {100 * v / total:5.1f} %  {k[:90]}")
    print(f"T={a.tokens} total {total:.1f} us per call (eager, kernels only)")
    out = Path(os.environ.get("OUT", ".")) / f"moe_profile_{a.tokens}.json"
    out.write_text(json.dumps({"tokens": a.tokens, "us_per_call": rows, "total_us": total}, indent=1))


if __name__ == "__main__":
    main()

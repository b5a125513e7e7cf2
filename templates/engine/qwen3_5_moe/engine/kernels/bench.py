"""Time each op at the real Qwen3.5/3.6-35B-A3B shapes on CUDA: ``python -m <pkg>.kernels.bench``.

Prints one line per (op, shape): median µs (``triton.testing.do_bench``, inside a CUDA graph
when ``--graph`` so launch overhead is excluded), the bytes the op must move, and the
fraction of the 4.25 TB/s measured copy bandwidth that this is. Not used by the engine.
"""

from __future__ import annotations

import argparse

import torch
from triton.testing import do_bench, do_bench_cudagraph

from . import causal_conv1d_update, gated_rmsnorm, gdn_recurrent_step, moe_nvfp4, nvfp4_linear, rmsnorm

PEAK_BW = 4.25e12  # bytes/s, H200 device-to-device copy (DESIGN.md)
H, I, E, K_TOP, HK, HV, D = 2048, 512, 256, 8, 16, 32, 128


def _nvfp4(n, k, lead=()):
    w = torch.randint(0, 256, (*lead, n, k // 2), dtype=torch.uint8, device="cuda")
    s = (torch.rand(*lead, n, k // 16, device="cuda") + 0.5).to(torch.float8_e4m3fn)
    return w, s


def _nvfp4_bytes(n, k):
    return n * k // 2 + n * k // 16


def cases(t: int):
    """(name, bytes moved, fn) for T = t tokens (decode batch t)."""
    x = torch.randn(t, H, device="cuda").bfloat16()
    out = []
    w = torch.randn(H, device="cuda")
    out.append((f"rmsnorm+res T={t}", 4 * t * H * 2, lambda: rmsnorm(x, w, 1e-6, x)))
    o = torch.randn(t * HV, D, device="cuda").bfloat16()
    wg = torch.ones(D, device="cuda").bfloat16()
    out.append((f"gated_rmsnorm N={t * HV}", 3 * t * HV * D * 2, lambda: gated_rmsnorm(o, o, wg, 1e-6)))
    for n, k, name in ((2 * I, H, "shared gate_up"), (H, I, "shared down"), (8192, H, "in_proj_qkv")):
        pw, ps = _nvfp4(n, k)
        g = torch.tensor(0.01, device="cuda")
        xk = torch.randn(t, k, device="cuda").bfloat16()
        nbytes = _nvfp4_bytes(n, k) + 2 * t * (n + k)
        out.append((f"nvfp4_linear {name} {n}x{k} M={t}", nbytes, lambda xk=xk, pw=pw, ps=ps, g=g: nvfp4_linear(xk, pw, ps, g)))
    w13, s13 = _nvfp4(2 * I, H, (E,))
    w2, s2 = _nvfp4(H, I, (E,))
    g13, g2 = torch.full((E, 2), 0.01, device="cuda"), torch.full((E,), 0.01, device="cuda")
    tw, ids = torch.softmax(torch.randn(t, E, device="cuda"), -1).topk(K_TOP, -1)
    n_hit = int(torch.unique(ids).numel())
    nbytes = n_hit * (_nvfp4_bytes(2 * I, H) + _nvfp4_bytes(H, I)) + 2 * t * H * 2
    ids32 = ids.to(torch.int32)
    out.append((f"moe_nvfp4 T={t} ({n_hit} experts hit)", nbytes,
                lambda: moe_nvfp4(x, ids32, tw, w13, s13, g13, w2, s2, g2)))
    q = torch.randn(t, HK, D, device="cuda").bfloat16()
    v = torch.randn(t, HV, D, device="cuda").bfloat16()
    gg, beta = -torch.rand(t, HV, device="cuda"), torch.rand(t, HV, device="cuda")
    state = torch.zeros(t, HV, D, D, device="cuda")
    slots = torch.arange(t, device="cuda", dtype=torch.int32)
    out.append((f"gdn_recurrent_step B={t}", 2 * t * HV * D * D * 4,
                lambda: gdn_recurrent_step(q, q, v, gg, beta, state, slots)))
    xc = torch.randn(t, 8192, device="cuda").bfloat16()
    cs = torch.zeros(t, 8192, 3, device="cuda").bfloat16()
    wc = torch.randn(8192, 4, device="cuda").bfloat16()
    out.append((f"causal_conv1d_update B={t}", t * 8192 * 2 * (1 + 3 + 3 + 1) + 8192 * 4 * 2,
                lambda: causal_conv1d_update(xc, cs, wc, slots)))
    return out


def main() -> None:
    """Print the timing table for the decode batch sizes given on the command line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--graph", action="store_true", help="time inside a CUDA graph (no launch overhead)")
    args = ap.parse_args()
    bench = do_bench_cudagraph if args.graph else do_bench
    print(f"{'op':<52} {'µs':>9} {'MB':>8} {'of 4.25 TB/s':>12}")
    for t in args.tokens:
        for name, nbytes, fn in cases(t):
            fn()
            ms = bench(fn)
            print(f"{name:<52} {ms * 1e3:9.2f} {nbytes / 1e6:8.2f} {nbytes / (ms * 1e-3) / PEAK_BW:12.1%}")


if __name__ == "__main__":
    main()

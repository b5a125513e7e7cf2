"""Time each op at the real Qwen3.5/3.6-35B-A3B shapes on CUDA: ``python -m <pkg>.kernels.bench``.

Prints one line per (op, shape): median µs (``triton.testing.do_bench``, inside a CUDA graph
when ``--graph`` so launch overhead is excluded), the bytes the op must move, and the
fraction of the 4.25 TB/s measured copy bandwidth that this is. Not used by the engine.
"""

from __future__ import annotations

import argparse

import torch
from triton.testing import do_bench, do_bench_cudagraph

from . import causal_conv1d_update, gated_rmsnorm, gdn_recurrent_step, moe_nvfp4, nvfp4_linear, rmsnorm, route_topk

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
    w13, s13 = _nvfp4(2 * I, H, (E + 1,))  # expert E: the shared expert, stacked (MoeWeights.shared_stacked)
    w2, s2 = _nvfp4(H, I, (E + 1,))
    g13, g2 = torch.full((E + 1, 2), 0.01, device="cuda"), torch.full((E + 1,), 0.01, device="cuda")
    logits = torch.randn(t, E + 1, device="cuda").bfloat16()
    out.append((f"route_topk T={t} E={E}+shared", t * (E + 1) * 2, lambda: route_topk(logits, K_TOP, True)))
    ids, tw = route_topk(logits, K_TOP, True)
    n_hit = int(torch.unique(ids).numel())
    nbytes = n_hit * (_nvfp4_bytes(2 * I, H) + _nvfp4_bytes(H, I)) + 2 * t * H * 2
    for words, unroll in ((1, 1), (0, 1), (1, 0), (0, 0)):
        if t > 8 and (words, unroll) != (1, 1):
            continue  # the flags only change the GEMV path (T ≤ 8)
        out.append((f"moe_nvfp4 T={t} k=8+1 ({n_hit} hit) words={words} unroll={unroll}", nbytes,
                    lambda words=words, unroll=unroll: moe_nvfp4(x, ids, tw, w13, s13, g13, w2, s2, g2,
                                                                 gemv_words=words, gemv_unroll=unroll)))
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


def sweep_moe_gemv(bench, t: int = 1) -> None:
    """Time ``moe_nvfp4`` at T = t (k = 8 + shared) over GEMV block sizes and warps; one line each."""
    w13, s13 = _nvfp4(2 * I, H, (E + 1,))
    w2, s2 = _nvfp4(H, I, (E + 1,))
    g13, g2 = torch.full((E + 1, 2), 0.01, device="cuda"), torch.full((E + 1,), 0.01, device="cuda")
    x = torch.randn(t, H, device="cuda").bfloat16()
    ids, tw = route_topk(torch.randn(t, E + 1, device="cuda").bfloat16(), K_TOP, True)
    for bn in (8, 16, 32):
        for dbn in (4, 8, 16):
            for nw in (4, 8):
                kw = dict(gemv_block_n=bn, gemv_down_block_n=dbn, gemv_num_warps=nw)
                fn = lambda kw=kw: moe_nvfp4(x, ids, tw, w13, s13, g13, w2, s2, g2, **kw)  # noqa: E731
                fn()
                print(f"sweep moe_nvfp4 T={t} {kw}: {bench(fn) * 1e3:.2f} µs")


def main() -> None:
    """Print the timing table for the decode batch sizes given on the command line."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--graph", action="store_true", help="time inside a CUDA graph (no launch overhead)")
    ap.add_argument("--sweep", action="store_true", help="also sweep the MoE GEMV launch settings at T = 1")
    args = ap.parse_args()
    bench = do_bench_cudagraph if args.graph else do_bench
    if args.sweep:
        sweep_moe_gemv(bench)
    print(f"{'op':<52} {'µs':>9} {'MB':>8} {'of 4.25 TB/s':>12}")
    for t in args.tokens:
        for name, nbytes, fn in cases(t):
            fn()
            ms = bench(fn)
            print(f"{name:<52} {ms * 1e3:9.2f} {nbytes / 1e6:8.2f} {nbytes / (ms * 1e-3) / PEAK_BW:12.1%}")


if __name__ == "__main__":
    main()

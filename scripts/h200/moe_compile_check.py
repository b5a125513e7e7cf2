"""Compile the MoE kernels of engine/ops/moe_*.py for an H200 (sm_90) without a GPU, and report spills.

The Triton interpreter (the CPU tests) accepts programs the GPU compiler rejects; this runs triton's
real compiler and its bundled ptxas on each kernel at every bucket's default launch (and the T = 1
path), using ``prefill_compile_check._compile``, and prints registers and spill (STACK) bytes per
thread. Usage (any machine with triton; TRITON_INTERPRET unset): ``python3 scripts/h200/moe_compile_check.py``.
Exit status 1 when a kernel fails to compile.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prefill_compile_check import ENGINE, _compile  # noqa: E402


def _ops():
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("unset TRITON_INTERPRET: the interpreter replaces the compiler")
    pkg = types.ModuleType("_moe_compile_check_engine")
    pkg.__path__ = [str(ENGINE)]
    sys.modules[pkg.__name__] = pkg
    return {n: importlib.import_module(f"{pkg.__name__}.ops.{n}") for n in ("moe_fused", "moe_gemm", "moe_align", "moe_reduce")}


def kernels() -> list[tuple[str, object, dict, dict, dict]]:
    ops = _ops()
    fused, gemm, align, red = ops["moe_fused"], ops["moe_gemm"], ops["moe_align"], ops["moe_reduce"]
    p = lambda t: "*" + t  # noqa: E731
    i32 = "i32"
    gemm_sig = dict(a_ptr=p("bf16"), w32_ptr=p("i32"), w16_ptr=p("i16"), g_ptr=p("fp32"), c_ptr=p("bf16"), sid_ptr=p("i32"),
                    bexp_ptr=p("i32"), tw_ptr=p("fp32"), P=i32, N=i32, K_TRUE=i32, N_SG=i32, ROW_WORDS=i32, E=i32,
                    stride_am=i32, stride_we=i32, stride_ge=i32, stride_cm=i32, stride_cc=i32)
    out = [("align", align._align_kernel,
            dict(ids_ptr=p("i64"), nv_ptr=p("i32"), sid_ptr=p("i32"), bexp_ptr=p("i32"), P=i32, E=i32, TOP_K=i32,
                 N_VALID=i32, N_BLOCKS=i32),
            dict(HAS_NV=True, BLOCK_M=16, BLOCK_E=512, CHUNK=1024), dict(num_warps=4)),
           ("reduce", red._reduce_kernel,
            dict(y_ptr=p("fp32"), ids_ptr=p("i64"), nv_ptr=p("i32"), out_ptr=p("bf16"), H=i32, E=i32, N_VALID=i32,
                 stride_y=i32, stride_o=i32),
            dict(TOP_K=9, HAS_NV=True, BLOCK_H=1024), dict(num_warps=4))]
    for b, cfg in fused.DEFAULTS.items():
        opts = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        base = dict(CHUNK_SG=gemm.CHUNK_SG, BLOCK_M=cfg.block_m, EVEN_K=True)
        for split in sorted({1, cfg.split_k}):
            sig = dict(gemm_sig, c_ptr=p("fp32") if split > 1 else p("bf16"))
            out.append((f"{b} gate_up split {split}", gemm._moe_gemm_kernel, sig,
                        dict(base, A_DIV=9, GATED=True, ROUTED=False, SPLIT_K=split, DIRECT=False, BLOCK_N=cfg.block_n), opts))
        out.append((f"{b} down", gemm._moe_gemm_kernel, dict(gemm_sig, c_ptr=p("fp32")),
                    dict(base, A_DIV=1, GATED=False, ROUTED=True, SPLIT_K=1, DIRECT=False, BLOCK_N=cfg.down_block_n), opts))
        out.append((f"{b} combine", gemm._combine_kernel,
                    dict(part_ptr=p("fp32"), sid_ptr=p("i32"), bexp_ptr=p("i32"), g_ptr=p("fp32"), h_ptr=p("bf16"), P=i32, N=i32,
                         N_CHUNKS=i32, E=i32, stride_pc=i32, stride_pm=i32, stride_hm=i32),
                    dict(DIRECT=False, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n), dict(num_warps=cfg.num_warps)))
    s = fused.DEFAULTS["s"]
    opts = dict(num_warps=s.num_warps, num_stages=s.num_stages)
    out.append(("T=1 gate_up direct", gemm._moe_gemm_kernel, dict(gemm_sig, c_ptr=p("fp32"), bexp_ptr=p("i64")),
                dict(CHUNK_SG=gemm.CHUNK_SG, BLOCK_M=16, EVEN_K=True, A_DIV=9, GATED=True, ROUTED=False, SPLIT_K=s.split_k, DIRECT=True,
                     BLOCK_N=s.block_n), opts))
    out.append(("T=1 down token-major", gemm._down_token_kernel,
                dict(h_ptr=p("bf16"), w32_ptr=p("i32"), w16_ptr=p("i16"), g_ptr=p("fp32"), ids_ptr=p("i64"), tw_ptr=p("fp32"),
                     out_ptr=p("bf16"), N=i32, K_TRUE=i32, N_SG=i32, ROW_WORDS=i32, E=i32, stride_hm=i32, stride_we=i32,
                     stride_om=i32),
                dict(TOP_K=9, CHUNK_SG=gemm.CHUNK_SG, BLOCK_M=16, BLOCK_N=s.down_block_n, EVEN_K=True), opts))
    return out


def main() -> int:
    failed = False
    for name, fn, sig, consts, opts in kernels():
        try:
            print(f"OK   {name:22s} {_compile(fn, sig, consts, **opts)}  {consts} {opts}", flush=True)
        except Exception as err:  # report every kernel, then fail
            failed = True
            print(f"FAIL {name:22s} {type(err).__name__}: {str(err)[:2000]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

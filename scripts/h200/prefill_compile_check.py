"""Compile the prefill kernels of engine/ops/ for an H200 (sm_90) without a GPU, and report spills.

The Triton interpreter (the CPU tests) accepts programs the GPU compiler rejects (e.g. a variable
whose type changes inside an ``if``); this runs triton's real compiler and its bundled ptxas on
each kernel at the launchers' default configuration, with the 16-byte divisibility the runtime
specialises on, and prints registers and spill (STACK) bytes per thread from cuobjdump.
Usage (any machine with triton; TRITON_INTERPRET must be unset): ``python3 scripts/h200/prefill_compile_check.py``.
Exit status 1 when a kernel fails to compile.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "templates/engine/qwen3_5_moe/engine"


def _ops():
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("unset TRITON_INTERPRET: the interpreter replaces the compiler")
    pkg = types.ModuleType("_compile_check_engine")
    pkg.__path__ = [str(ENGINE)]
    sys.modules[pkg.__name__] = pkg
    return {n: importlib.import_module(f"{pkg.__name__}.ops.{n}") for n in ("gdn_chunk", "attention_prefill", "conv1d_prefill")}


def cuobjdump(fn, sig: dict, consts: dict, opts: dict, *flags: str) -> str:
    """``cuobjdump FLAGS`` of ``fn`` compiled for sm_90 by triton (and its bundled ptxas) with this signature,
    constexprs and options; no GPU needed."""
    import triton
    import triton.backends.nvidia as nv
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    full = {**sig, **{k: "constexpr" for k in consts}}
    div = {(i,): [["tt.divisibility", 16]] for i, (n, t) in enumerate(full.items()) if t.startswith("*") or n.startswith("stride")}
    kern = triton.compile(ASTSource(fn, full, constexprs=consts, attrs=div), target=GPUTarget("cuda", 90, 32), options=opts)
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(kern.asm["cubin"])
    try:
        tool = Path(nv.__file__).parent / "bin" / "cuobjdump"
        return subprocess.run([str(tool), *flags, f.name], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(f.name)


def _compile(fn, sig: dict, consts: dict, **opts) -> str:
    out = cuobjdump(fn, sig, consts, opts, "--dump-resource-usage")
    usage = [line.strip() for line in out.splitlines() if "REG:" in line]
    return " ".join(usage[0].split()[:2]) if usage else "(no resource usage)"


def kernels() -> list[tuple[str, object, dict, dict, dict]]:
    """(name, jit function, signature, constexprs, options) at the launchers' defaults and real shapes."""
    ops = _ops()
    gdn, att, conv = ops["gdn_chunk"], ops["attention_prefill"], ops["conv1d_prefill"]
    p = lambda t: "*" + t  # noqa: E731
    i32 = "i32"
    dg, da, dc = gdn.DEFAULTS, att.DEFAULTS, conv.DEFAULTS
    common = dict(GROUP=2, BK=128, BLOCK_N=2, PREC="tf32")
    return [
        ("gdn prep", gdn._gdn_prep_kernel,
         dict(k_ptr=p("bf16"), v_ptr=p("bf16"), a_ptr=p("bf16"), b_ptr=p("bf16"), alog_ptr=p("fp32"), dtb_ptr=p("fp32"),
              cu_ptr=p("i64"), u_ptr=p("fp32"), w_ptr=p("fp32"), gc_ptr=p("fp32"), N=i32, HV=i32, DK=i32, DV=i32,
              stride_kt=i32, stride_kh=i32, stride_vt=i32, stride_vh=i32, stride_a=i32, stride_b=i32),
         {**common, "BV": 128}, dict(num_warps=dg["prep_num_warps"])),
        ("gdn state", gdn._gdn_state_kernel,
         dict(k_ptr=p("bf16"), u_ptr=p("fp32"), w_ptr=p("fp32"), gc_ptr=p("fp32"), state_ptr=p("fp32"), cu_ptr=p("i64"),
              slot_ptr=p("i64"), h_ptr=p("fp32"), vn_ptr=p("fp32"), N=i32, HV=i32, DK=i32, DV=i32, stride_kt=i32, stride_kh=i32),
         {**common, "BV": dg["state_block_v"]}, dict(num_warps=dg["state_num_warps"], num_stages=dg["state_num_stages"])),
        ("gdn output", gdn._gdn_output_kernel,
         dict(q_ptr=p("bf16"), k_ptr=p("bf16"), gc_ptr=p("fp32"), h_ptr=p("fp32"), vn_ptr=p("fp32"), cu_ptr=p("i64"), o_ptr=p("bf16"),
              N=i32, HV=i32, DK=i32, DV=i32, stride_qt=i32, stride_qh=i32, stride_kt=i32, stride_kh=i32, stride_ot=i32,
              stride_oh=i32, scale="fp32"),
         {**common, "BV": dg["block_v"]}, dict(num_warps=dg["num_warps"])),
        ("attention prefill", att._attn_prefill_kernel,
         dict(q_ptr=p("bf16"), kc_ptr=p("bf16"), vc_ptr=p("bf16"), g_ptr=p("bf16"), cu_ptr=p("i64"), pos_ptr=p("i64"),
              slot_ptr=p("i64"), tb_ptr=p("i32"), o_ptr=p("bf16"), N=i32, HD=i32, stride_qt=i32, stride_qh=i32, stride_ks=i32,
              stride_kl=i32, stride_kh=i32, stride_tb=i32, stride_gt=i32, stride_gh=i32, stride_ot=i32, stride_oh=i32,
              qk_scale="fp32", bs=i32),
         dict(GROUP=8, BLOCK_M=da["block_m"], BLOCK_N=da["block_n"], BLOCK_D=256, BLOCK_SEQ=2, PAGED=0),
         dict(num_warps=da["num_warps"], num_stages=da["num_stages"])),
        ("conv1d prefill", conv._conv1d_prefill_kernel,
         dict(x_ptr=p("bf16"), state_ptr=p("bf16"), w_ptr=p("bf16"), cu_ptr=p("i64"), slot_ptr=p("i64"), y_ptr=p("bf16"),
              N=i32, C=i32, stride_xt=i32, stride_ss=i32, stride_sc=i32, stride_wc=i32, stride_yt=i32),
         dict(W=4, BT=dc["block_t"], BC=dc["block_c"], BLOCK_N=2), dict(num_warps=dc["num_warps"])),
    ]


def main() -> int:
    failed = False
    for name, fn, sig, consts, opts in kernels():
        try:
            print(f"OK   {name:18s} {_compile(fn, sig, consts, **opts)}  {consts} {opts}", flush=True)
        except Exception as err:  # report every kernel, then fail
            failed = True
            print(f"FAIL {name:18s} {type(err).__name__}: {err}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

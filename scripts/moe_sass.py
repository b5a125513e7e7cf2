"""Instructions per weight element in the MoE GEMM's K loop, read from the SASS that Triton and its bundled ptxas
make for an H200 (sm_90) on any machine, no GPU needed (issue 12).

The MoE op at decode sizes is bound by instruction issue, not by bandwidth (the H200 profile at T = 32: integer pipe
61 %, DRAM 28 %; docs/results/h200-2026-12-04-c), so the count of instructions each weight element costs in the hot
loop is the figure a kernel change must lower. For each launch of ``ops/moe_fused`` at its buckets' defaults (from
``scripts/h200/moe_compile_check.py``) this compiles the kernel, finds the innermost loop holding tensor-core
instructions (HMMA/HGMMA), and prints its length and ``length × 32 × num_warps / elements per iteration`` (thread
instructions per weight element; elements per iteration = BLOCK_N × 256 × 2 for gate_up, × 1 for down), with the
loop's most frequent opcodes. The ncu count at T = 32 (104 M warp instructions for gate_up's 344 M elements, 9.7 per
element) matches this static figure (10.5) to within the loop's prologue and predicated-off work.

    python3 scripts/moe_sass.py [--only "m gate_up"] [--top 12]   # TRITON_INTERPRET unset
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "h200"))


def sass_of(fn, sig: dict, consts: dict, opts: dict) -> str:
    """cuobjdump --dump-sass of ``fn`` compiled for sm_90 with the given signature, constexprs and options."""
    from prefill_compile_check import cuobjdump

    return cuobjdump(fn, sig, consts, opts, "--dump-sass")


def hot_loop(sass: str) -> list[str]:
    """Opcodes of the innermost loop (a backward branch's span) that holds tensor-core instructions; [] if none."""
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), re.sub(r"^@!?U?P\w+\s+", "", m.group(2)).split()[0]))
    loops = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BRA\S*\s+(0x[0-9a-f]+)", line)
        if m and int(m.group(2), 16) < int(m.group(1), 16):
            loops.append((int(m.group(2), 16), int(m.group(1), 16)))
    body = lambda lo, hi: [op for a, op in ins if lo <= a <= hi]  # noqa: E731
    with_mma = [(hi - lo, lo, hi) for lo, hi in loops if any(o.startswith(("HMMA", "HGMMA")) for o in body(lo, hi))]
    if not with_mma:
        return []
    _, lo, hi = min(with_mma)
    return body(lo, hi)


def main() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("unset TRITON_INTERPRET: the interpreter replaces the compiler")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="launches whose name contains this (e.g. 'm gate_up')")
    ap.add_argument("--top", type=int, default=12, help="opcodes listed per launch")
    a = ap.parse_args()
    from moe_compile_check import kernels

    for name, fn, sig, consts, opts in kernels():
        if "BLOCK_N" not in consts or "GATED" not in consts or (a.only and a.only not in name):
            continue
        loop = hot_loop(sass_of(fn, sig, consts, opts))
        elements = consts["BLOCK_N"] * 256 * (2 if consts["GATED"] else 1)
        per = len(loop) * 32 * opts.get("num_warps", 4) / elements if loop else float("nan")
        top = collections.Counter(loop).most_common(a.top)
        print(f"{name:24s} BLOCK_M {consts.get('BLOCK_M'):3d} BLOCK_N {consts['BLOCK_N']:3d} warps {opts.get('num_warps')}: "
              f"loop {len(loop)} instructions, {per:.2f} per weight element")
        print("    " + ", ".join(f"{op} {n}" for op, n in top))


if __name__ == "__main__":
    main()

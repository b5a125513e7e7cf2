"""scripts/moe_sass.py reads the MoE GEMM's hot loop out of the SASS triton and its bundled ptxas make for an H200
(sm_90), no GPU needed; the per-element instruction figure is what decode-size MoE work is steered by (issue 12)."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_moe_sass_reports_the_k_loop_of_each_projection():
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(ROOT / "scripts/moe_sass.py"), "--only", "m "], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    figures = dict(re.findall(r"^(m \w+(?: split \d)?)\s.*?, ([\d.]+|nan) per weight element", res.stdout, re.M))
    # split 1 always, and the m bucket's own split_k where that is not 1 (scripts/h200/moe_compile_check.kernels)
    assert "m gate_up split 1" in figures and "m down" in figures, res.stdout
    assert set(figures) <= {"m down"} | {f"m gate_up split {s}" for s in (1, 2, 4)}, res.stdout
    for name, per in figures.items():
        # a loop with tensor-core instructions was found, and a weight element costs some instructions, not hundreds
        assert math.isfinite(float(per)) and 1.0 < float(per) < 100.0, (name, per)
    assert "HMMA" in res.stdout


def test_hot_loop_picks_the_innermost_loop_with_tensor_core_instructions():
    sys.path.insert(0, str(ROOT / "scripts"))
    from moe_sass import hot_loop

    sass = "\n".join([
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
        "        /*0010*/                   LOP3.LUT R2, R2, 0xf, RZ, 0xc0, !PT ;",  # outer loop start
        "        /*0020*/                   IMAD.SHL.U32 R3, R2, 0x40, RZ ;",  # inner loop start
        "        /*0030*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;",
        "        /*0040*/               @P0 BRA 0x20 ;",
        "        /*0050*/                   IADD3 R2, R2, 0x1, RZ ;",
        "        /*0060*/               @P1 BRA 0x10 ;",
        "        /*0070*/                   FADD R5, R5, R6 ;",  # a loop without tensor cores is not it
        "        /*0080*/               @P2 BRA 0x70 ;",
        "        /*0090*/                   EXIT ;",
    ])
    assert hot_loop(sass) == ["IMAD.SHL.U32", "HMMA.16816.F32.BF16", "BRA"]
    assert hot_loop("        /*0000*/                   EXIT ;") == []

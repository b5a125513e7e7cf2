"""The prefill kernels compile for an H200 (sm_90) with triton's real compiler and bundled ptxas,
no GPU needed: the interpreter the other CPU tests use accepts programs the compiler rejects.
Runs scripts/h200/prefill_compile_check.py in a subprocess without TRITON_INTERPRET."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_prefill_kernels_compile_for_sm90():
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, str(ROOT / "scripts/h200/prefill_compile_check.py")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    ok = [line for line in res.stdout.splitlines() if line.startswith("OK ")]
    assert res.returncode == 0 and len(ok) == 5, res.stdout + res.stderr[-3000:]

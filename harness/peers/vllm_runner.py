"""The vLLM peer as ``run_peer`` sees it: a subprocess of ``harness/peers/vllm/run_vllm.py`` on the staged bundle.

vLLM needs CUDA and the bundle installed into ``/tmp/site`` on the device machine
(``harness/peers/vllm/README.md``); anywhere else this fails with a ``PeerError`` saying so.
It runs at full shapes only (its own prompt draw, 256 in / 256 out, 32 streams).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.peers import PeerError, PeerRequest
from harness.stats import spread


def run(req: PeerRequest) -> dict:
    """Run vLLM on ``req.workload`` and return its summary (``median``, ``spread``, ``samples``, ``unit``).

    Raises:
        PeerError: no CUDA here, vLLM not staged in its site folder, scaled-down shapes, or the run failed.
    """
    import torch

    from harness.peers.vllm import RUN_SCRIPT, SITE, VERSION

    if req.device != "cuda" or not torch.cuda.is_available():
        raise PeerError("the vllm peer needs CUDA: run `metainfer bench --peer vllm` on the GPU machine (--device cuda)")
    if not (SITE / "vllm").is_dir():
        raise PeerError(f"vLLM {VERSION} is not staged in {SITE}; install it with harness/peers/vllm/install.sh (see its README.md)")
    if req.shapes.scaled_down:
        raise PeerError("the vllm peer runs full shapes only (256 in / 256 out / 32 streams)")
    with tempfile.TemporaryDirectory(prefix="metainfer-vllm-") as tmp:
        out = Path(tmp) / "vllm.json"
        cmd = [sys.executable, str(RUN_SCRIPT), "--checkpoint", str(req.checkpoint), "--out", str(out),
               "--workloads", req.workload, "--seed", str(req.seed), "--reps", str(req.rounds), "--reps-long", str(req.rounds)]
        env = os.environ | {"PYTHONPATH": f"{SITE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not out.is_file():
            raise PeerError(f"vLLM run failed (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-2000:]}")
        result = json.loads(out.read_text())
    if result.get("error"):
        raise PeerError(f"vLLM run reported: {result['error']}")
    w = result["workloads"][req.workload]
    # run_vllm.py's spread is absolute (max - min); ours is relative to the median
    return {"peer": f"vllm-{VERSION}", "unit": w["unit"], "median": w["median"], "spread": spread(w["samples"]), "samples": w["samples"]}

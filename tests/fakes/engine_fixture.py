"""A small engine folder inside a real temporary git repository, shaped like a build worktree.

``make_worktree(root)`` writes ``root/wt`` (a git repo with ``harness/`` and
``generated/<target>/`` committed) and returns a ``ProposalContext`` for iteration 1 of the
tiny target, with the record dir outside the worktree (``root/runs/iter-001``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from metainfer.agents.base import ProposalContext
from metainfer.targets import make_target

TARGET = ("qwen3.6-35b-a3b-tiny", "nvfp4", "cpu")
TUNABLES = {"values": {"block_n": 64, "num_warps": 4}, "space": {"block_n": [32, 64, 128], "num_warps": [2, 4, 8]}}

BEST_GATE = {
    "schema": 1, "engine": "e", "baseline": None, "seed": 7, "ok": True,
    "env": {"gpu": "cpu", "driver": "", "torch": "2.13", "triton": "3.9", "commit": "abc"},
    "stages": [{"name": "static", "ok": True, "seconds": 0.1, "error": None, "detail": {}},
               {"name": "parity", "ok": True, "seconds": 3.0, "error": None, "detail": {}}],
    "parity": {"ok": True, "max_rel_err": 0.0041, "tolerance": 0.03, "worst_prompt": "len-65-batched",
               "worst_layer": 5, "prompts": []},
    "bench": {"scaled_down": True,
              "workloads": {"decode-bs1": {"unit": "tok/s", "higher_is_better": True,
                                           "candidate": {"median": 21.5, "spread": 0.4, "samples": [21.1, 21.5, 21.9]},
                                           "baseline": {"median": 21.0, "spread": 0.5, "samples": [21.0]},
                                           "roofline_fraction": 0.0123,
                                           "profile": [{"kernel": "moe_w4a16", "calls": 8, "us": 812.0}]}},
              "objective": {"speedup": 1.02, "noise": 0.03, "beats_baseline": False}},
}


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` and return stdout (raises on failure)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_worktree(root: Path, iteration: int = 1, history: list | None = None) -> ProposalContext:
    """Create the repo under ``root/wt`` and return the iteration's context (see the module docstring)."""
    target = make_target(*TARGET)
    wt = root / "wt"
    engine = wt / "generated" / target.name
    (engine / "engine").mkdir(parents=True)
    (wt / "harness").mkdir()
    (wt / "harness" / "gate.py").write_text("# the judge\n")
    (engine / "ENGINE.md").write_text("# Engine file map\n- `engine/moe.py`: routed experts (W4A16 matmul)\n"
                                      "- `engine/tunables.json`: block sizes read at load\n")
    (engine / "engine" / "tunables.json").write_text(json.dumps(TUNABLES, indent=1) + "\n")
    (engine / "engine" / "moe.py").write_text("BLOCK_N = 64\n\n\ndef moe_ref(x):\n    return x\n")
    git(wt, "init", "-q", "-b", "main")
    git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "baseline")
    return ProposalContext(target=target, worktree=wt, engine_dir=engine, iteration=iteration, history=history or [],
                           best=BEST_GATE, record_dir=root / "runs" / f"iter-{iteration:03d}", seed=7)

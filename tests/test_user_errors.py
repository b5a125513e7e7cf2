"""What a new user following the README ran into: each refusal comes before anything changes, in one line that names
the problem and the fix (reported 2026-12-04)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = "qwen3.6-35b-a3b-tiny"


def _cli(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in (env or os.environ).items() if k != "ANTHROPIC_API_KEY"}
    return subprocess.run([sys.executable, "-m", "metainfer.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _one_line_error(p: subprocess.CompletedProcess) -> str:
    """The error line of a refused command (exit status 2, no traceback, one line)."""
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stdout, p.stderr)
    msg = p.stderr.strip()
    assert msg.startswith("error:") and len(msg.splitlines()) == 1, msg
    return msg


def test_a_damaged_run_json_is_named_in_one_line_by_resume_and_report(tmp_path):
    from metainfer.build.records import RunRecord

    runs = tmp_path / "runs"
    rec = RunRecord.create(runs, f"{TINY}-nvfp4-cpu", {"agent": "offline", "seed": 0, "iterations": 1})
    f = rec.path / "run.json"
    f.write_text(f.read_text()[:40])  # truncated
    before = f.read_text()
    for args in (("build", "--resume", rec.run_id, "--runs-dir", str(runs)), ("report", rec.run_id, "--runs-dir", str(runs))):
        msg = _one_line_error(_cli(*args))
        assert str(f) in msg and "not valid JSON" in msg and "restore" in msg and "new build" in msg, msg
    assert f.read_text() == before

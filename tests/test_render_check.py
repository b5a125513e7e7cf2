"""``metainfer render --check``: every engine under generated/ is its template (at the recorded git tree) rendered
for its target plus the patches recorded beside it; ``--record`` states any difference as an explicit patch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H200 = "qwen3.6-35b-a3b-nvfp4-h200"


def _cli(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return subprocess.run([sys.executable, "-m", "metainfer.cli", "render", *args], cwd=repo, capture_output=True,
                          text=True, timeout=600, env=env)


def test_committed_engines_equal_their_template_plus_recorded_patches():
    p = _cli(ROOT, "--check")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"ok   generated/{H200}" in p.stdout
    m = json.loads((ROOT / "generated" / f"{H200}.lineage" / "manifest.json").read_text())
    # the H200 engine is the render of the template at its git tree; its only patch is the stated drift
    assert [x["kind"] for x in m["patches"]] == ["drift"] and m["template_tree"]


def test_an_unrecorded_edit_fails_the_check_until_it_is_recorded(tmp_path):
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    for name in ("metainfer", "templates"):  # this checkout's code (the clone has the committed history)
        subprocess.run(["cp", "-r", str(ROOT / name), str(repo)], check=True)
    moe = repo / "generated" / H200 / "engine" / "moe.py"
    moe.write_text(moe.read_text() + "\n# a hand edit nobody recorded\n")
    p = _cli(repo, "--check")
    assert p.returncode == 1 and f"FAIL generated/{H200}" in p.stdout and "engine/moe.py" in p.stdout, p.stdout
    p = _cli(repo, "--record", H200, "--template-rev", json.loads(
        (repo / "generated" / f"{H200}.lineage" / "manifest.json").read_text())["template_tree"])
    assert p.returncode == 0, p.stderr
    drift = (repo / "generated" / f"{H200}.lineage" / "001-drift.patch").read_text()
    assert "+# a hand edit nobody recorded" in drift
    assert _cli(repo, "--check").returncode == 0

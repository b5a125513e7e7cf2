"""The scripted agent: applies patches in order with git apply, one per iteration."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from metainfer.agents import AgentError, ProposalContext, get_agent
from metainfer.targets import make_target


def _repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "generated" / "t").mkdir(parents=True)
    (r / "generated" / "t" / "k.py").write_text("BLOCK = 64\n")
    subprocess.run(["git", "init", "-q", str(r)], check=True)
    return r


def _ctx(r: Path, i: int) -> ProposalContext:
    return ProposalContext(target=make_target("qwen3.6-35b-a3b-tiny", "bf16", "cpu"), worktree=r,
                           engine_dir=r / "generated" / "t", iteration=i, history=[], best={}, record_dir=r)


PATCH = """BLOCK 64 -> 128: fewer programs
--- a/generated/t/k.py
+++ b/generated/t/k.py
@@ -1 +1 @@
-BLOCK = 64
+BLOCK = 128
"""


def test_applies_in_order_then_runs_out(tmp_path):
    r = _repo(tmp_path)
    p1 = tmp_path / "01.diff"
    p1.write_text(PATCH)
    p2 = tmp_path / "02.patch"
    p2.write_text("From abc Mon Sep 17 00:00:00 2001\nSubject: [PATCH] BLOCK 128 -> 256\n\n---\n"
                  + PATCH.split("\n", 1)[1].replace("-BLOCK = 64", "-BLOCK = 128").replace("+BLOCK = 128", "+BLOCK = 256"))
    agent = get_agent("scripted", patches=[str(tmp_path)])  # a folder: its patches sorted by name
    a = agent.propose(_ctx(r, 1))
    assert a.summary == "BLOCK 64 -> 128: fewer programs" and a.changed
    assert (r / "generated/t/k.py").read_text() == "BLOCK = 128\n"
    b = agent.propose(_ctx(r, 2))
    assert b.summary == "BLOCK 128 -> 256" and (r / "generated/t/k.py").read_text() == "BLOCK = 256\n"
    c = agent.propose(_ctx(r, 3))
    assert not c.changed and (r / "generated/t/k.py").read_text() == "BLOCK = 256\n"


def test_patch_that_does_not_apply_raises(tmp_path):
    r = _repo(tmp_path)
    (r / "generated/t/k.py").write_text("BLOCK = 32\n")
    p = tmp_path / "x.diff"
    p.write_text(PATCH.split("\n", 1)[1])  # no prose line: the summary would be the file name
    with pytest.raises(AgentError, match="x.diff does not apply"):
        get_agent("scripted", patches=[p]).propose(_ctx(r, 1))
    assert (r / "generated/t/k.py").read_text() == "BLOCK = 32\n"


def test_missing_patch_file_is_an_error(tmp_path):
    with pytest.raises(AgentError, match="does not exist"):
        get_agent("scripted", patches=[tmp_path / "nope.diff"])

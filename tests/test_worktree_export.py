"""The build loop gates what an acceptance commits: the candidate exported from the staged tree, beside the baseline
exported from its commit, in a real temporary git repository."""

from __future__ import annotations

import subprocess
from pathlib import Path

from metainfer.build.worktree import TargetWorktree

TARGET = "tiny-cpu"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def test_the_candidate_is_exported_from_the_staged_tree_without_ignored_files(tmp_path):
    repo = tmp_path / "repo"
    eng = repo / "generated" / TARGET / "engine"
    eng.mkdir(parents=True)
    (eng / "__init__.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("*.egg-info/\n.metainfer/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "engine")
    wt = TargetWorktree(repo, TARGET, repo / ".metainfer" / "worktrees" / TARGET).ensure()
    base_sha = wt.head_sha()
    # the agent's edit: a tracked change, a new file, and a file git ignores (red team R3: role_from_ignored_file
    # slept unless it found its ignored stamp, which the gated worktree held and the committed baseline never did)
    (wt.engine_dir / "engine" / "__init__.py").write_text("x = 2\n")
    (wt.engine_dir / "engine" / "new.py").write_text("y = 3\n")
    (wt.engine_dir / "engine" / "stamp.egg-info").mkdir()
    (wt.engine_dir / "engine" / "stamp.egg-info" / "PKG-INFO.txt").write_text("candidate\n")
    diff = wt.stage_diff()
    assert set(diff.paths) == {f"generated/{TARGET}/engine/__init__.py", f"generated/{TARGET}/engine/new.py"}

    cand = wt.export(wt.staged_tree(), tmp_path / "x" / "candidate")
    best = wt.export(base_sha, tmp_path / "x" / "best")
    files = lambda d: sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
    assert files(cand) == ["engine/__init__.py", "engine/new.py"]  # no stamp: judged == committed
    assert (cand / "engine" / "__init__.py").read_text() == "x = 2\n"
    assert files(best) == ["engine/__init__.py"] and (best / "engine" / "__init__.py").read_text() == "x = 1\n"
    wt.commit("edit")
    assert _git(wt.path, "ls-tree", "-r", "--name-only", "HEAD") == "\n".join(
        [".gitignore", f"generated/{TARGET}/engine/__init__.py", f"generated/{TARGET}/engine/new.py"])

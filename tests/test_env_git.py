"""``harness.env.git_commit`` runs git on a candidate's folder in the judge's own process: nothing of the candidate's
may make git run a command there (a repository of its own with ``core.fsmonitor`` or hooks, a filter in config)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.env import git_commit


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args], check=True, capture_output=True)


def test_a_repository_inside_the_candidate_runs_nothing(tmp_path):
    outer = tmp_path / "worktree"
    engine = outer / "generated" / "t"
    engine.mkdir(parents=True)
    (engine / "model.py").write_text("x = 1\n")
    _git(outer, "init", "-q")
    _git(outer, "add", ".")
    _git(outer, "commit", "-qm", "render")
    sha = subprocess.run(["git", "-C", str(outer), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert git_commit(engine) == sha  # the honest case: the commit the engine is at
    (engine / "model.py").write_text("x = 2\n")
    assert git_commit(engine).startswith(sha + "+diff:")

    marker = tmp_path / "ran"
    payload = engine / "hook.sh"
    payload.write_text(f"#!/bin/sh\ntouch {marker}\n")
    payload.chmod(0o755)
    _git(engine, "init", "-q")  # the candidate's own repository, its config naming the payload
    for key in ("core.fsmonitor", "core.hooksPath"):
        _git(engine, "config", key, str(payload) if key == "core.fsmonitor" else str(engine))
    assert git_commit(engine) is None and not marker.exists()
    assert git_commit(engine / "hook.sh") is None and not marker.exists()


def test_the_repositorys_own_fsmonitor_is_not_run_for_a_folder_below_it(tmp_path):
    """A payload in the (trusted) repository's config is not the candidate's, but git runs nothing from config here."""
    repo = tmp_path / "r"
    (repo / "engine").mkdir(parents=True)
    (repo / "engine" / "a.py").write_text("1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "x")
    marker = tmp_path / "ran"
    payload = tmp_path / "fsmon.sh"
    payload.write_text(f"#!/bin/sh\ntouch {marker}\n")
    payload.chmod(0o755)
    _git(repo, "config", "core.fsmonitor", str(payload))
    (repo / "engine" / "a.py").write_text("2\n")
    assert "+diff:" in git_commit(repo / "engine") and not marker.exists()

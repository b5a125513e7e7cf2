"""Which engine ``metainfer serve`` and ``metainfer generate`` run for ``--model/--quant/--gpu``: the head of the
target's branch (the last accepted iteration), from the worktree only while it is clean, else exported from git
(an interrupted build's candidate and a removed worktree alike); and the launch checks around it: SIGTERM removes
the temporary folders, a port in use fails at once, a missing ``--engine`` folder is one line.

Real git repositories and real CLI subprocesses; ``TMPDIR`` is private, so leftovers are visible.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metainfer.render import render_engine
from metainfer.targets import make_target
from test_serve_support import TINY, start_server

ROOT = Path(__file__).resolve().parents[1]
TARGET = f"{TINY}-bf16-cpu"
REL = f"generated/{TARGET}"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metainfer.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


@pytest.fixture
def repo(tmp_path) -> Path:
    """A clone-shaped git repo whose branch metainfer/<target> holds the rendered tiny engine, with its worktree
    at .metainfer/worktrees/<target> (clean)."""
    root = tmp_path / "repo"
    root.mkdir()
    for d in ("harness", "templates", "metainfer"):  # the layout find_repo_root checks; links, so `-m metainfer.cli` here
        (root / d).symlink_to(ROOT / d)              # imports the real package, not an empty namespace folder
    render_engine(make_target(TINY, "bf16", "cpu"), root / "generated", force=True)
    (root / ".gitignore").write_text(".metainfer/\n__pycache__/\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "engine")
    _git(root, "worktree", "add", "-q", "-b", f"metainfer/{TARGET}", str(root / ".metainfer/worktrees" / TARGET))
    return root


def _break_candidate(repo: Path) -> None:
    """An interrupted build's leftover: the worktree's engine edited and not committed (it cannot even import)."""
    init = repo / ".metainfer/worktrees" / TARGET / REL / "engine" / "__init__.py"
    init.write_text("raise RuntimeError('ungated candidate')\n")


def test_branch_head_from_the_clean_worktree_else_exported(repo, tmp_path, monkeypatch):
    from metainfer.serve.built import branch_engine

    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    sha = _git(repo, "rev-parse", f"metainfer/{TARGET}")
    wt = repo / ".metainfer/worktrees" / TARGET
    clean = branch_engine(repo, TARGET)
    assert clean.path == wt / REL and clean.sha == sha and clean.exported_because is None and sha[:10] in clean.describe()
    _break_candidate(repo)
    dirty = branch_engine(repo, TARGET)
    assert dirty.path.is_relative_to(tmp_path / "t") and dirty.sha == sha and "uncommitted" in dirty.exported_because
    assert "ungated" not in (dirty.path / "engine" / "__init__.py").read_text()
    (wt / REL / "engine" / "new.py").write_text("x = 1\n")  # an untracked file alone makes it dirty too
    _git(wt, "checkout", "-q", "--", REL)
    assert branch_engine(repo, TARGET).exported_because is not None
    _git(repo, "worktree", "remove", "--force", str(wt))  # what `metainfer clean` does; the branch stays
    gone = branch_engine(repo, TARGET)
    assert gone.sha == sha and "metainfer clean" in gone.exported_because and (gone.path / "engine" / "__init__.py").is_file()
    assert branch_engine(repo, "no-such-target") is None


def test_generate_runs_the_branch_head_after_clean_and_reports_no_decode_rate_for_one_token(repo, tiny_checkpoint):
    _git(repo, "worktree", "remove", "--force", str(repo / ".metainfer/worktrees" / TARGET))
    p = _cli("generate", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--checkpoint", str(tiny_checkpoint("bf16")),
             "--ids", "1,2,3", "--max-tokens", "1", cwd=repo)
    assert p.returncode == 0, p.stderr
    assert _git(repo, "rev-parse", f"metainfer/{TARGET}")[:10] in p.stderr and "exported from git" in p.stderr
    assert "decode n/a" in p.stdout and "nan" not in p.stdout, p.stdout


def test_generate_with_a_missing_engine_folder_is_one_line(tmp_path, tiny_checkpoint):
    p = _cli("generate", "--engine", str(tmp_path / "nope"), "--checkpoint", str(tiny_checkpoint("bf16")), "--ids", "1,2",
             cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert str(tmp_path / "nope") in p.stderr and "metainfer render" in p.stderr


def test_serve_runs_the_branch_head_not_the_candidate_and_sigterm_removes_the_export(repo, tmp_path, tiny_checkpoint):
    _break_candidate(repo)
    tmpdir = tmp_path / "t"
    tmpdir.mkdir()
    server = start_server(None, tiny_checkpoint("bf16"), max_batch=2, max_seq_len=64, max_queue=2, cwd=repo,
                          env={"TMPDIR": str(tmpdir)})
    try:
        sha = _git(repo, "rev-parse", f"metainfer/{TARGET}")
        assert any(sha[:10] in ln and "uncommitted" in ln for ln in server.lines), server.lines
        assert list(tmpdir.glob("metainfer-serve-*"))
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=30) == 0, server.lines
    finally:
        server.stop()
    assert not list(tmpdir.glob("metainfer-serve-*")), "SIGTERM left the exported engine behind"
    assert not any("Traceback" in ln for ln in server.lines), server.lines


def test_serve_on_a_port_in_use_fails_at_once(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        p = _cli("serve", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--checkpoint", str(tmp_path), "--port",
                 str(port), cwd=tmp_path, timeout=120)
    assert p.returncode == 2 and f"port {port}" in p.stderr and "--port" in p.stderr, p.stderr
    assert "Errno" not in p.stderr and "rendered" not in p.stderr and time.monotonic() - t0 < 60

"""One build, step or upgrade per target at a time: a second process is refused before it touches the worktree, the
lock goes with its holder however that ends, and one process may take it again (real subprocesses, a real repo)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from metainfer.build.config import BuildError
from metainfer.build.lock import lock_path, lock_target, unlock_target
from test_first_hour import _cli, _env, _project

TINY = "qwen3.6-35b-a3b-tiny"
TARGET = f"{TINY}-bf16-cpu"


def _holder(root: Path) -> subprocess.Popen:
    code = ("import sys, time; from metainfer.build.lock import lock_target; "
            f"lock_target(sys.argv[1], {TARGET!r}); print('held', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_until_the_holder_is_gone(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    holder = _holder(root)
    try:
        with pytest.raises(BuildError, match=rf"{TARGET} is in use by pid {holder.pid} .*metainfer build --resume"):
            lock_target(root, TARGET)
    finally:
        holder.send_signal(signal.SIGKILL)  # killed, not released: the kernel drops the lock with it
        holder.wait()
    lock_target(root, TARGET)
    lock_target(root, TARGET)  # again in the same process (an upgrade opens two sessions)
    unlock_target(root, TARGET)
    unlock_target(root, TARGET)
    other = _holder(root)  # released: another process takes it
    other.kill()
    other.wait()
    assert lock_path(root, TARGET).is_file()


def test_a_build_of_a_target_in_use_is_refused_before_it_writes_anything(tmp_path, tiny_checkpoint):
    repo = _project(tmp_path / "repo")
    holder = _holder(repo)
    try:
        p = _cli("build", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--iterations", "1", "--runs-dir",
                 str(tmp_path / "runs"), "--checkpoint", str(tiny_checkpoint("bf16")), cwd=repo, env=_env(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert p.returncode != 0 and f"is in use by pid {holder.pid}" in p.stdout + p.stderr, p.stdout + p.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert not (repo / ".metainfer" / "worktrees").exists()

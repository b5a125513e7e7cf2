"""The environment line every gate and benchmark result carries: GPU, driver, torch, triton, commit.

DESIGN.md ("Gate result", "Benchmark workloads") asks that every figure names the GPU and
the commit it was measured on; this module gathers them without failing when a piece is
absent (no GPU, no git, no triton): the missing entry is ``None``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path


#: git run on a folder the judge does not trust (a candidate engine): no system or global config, no hooks, no
#: fsmonitor, no external diff or textconv, so no setting can make git run a command of the candidate's
_GIT_SAFE = ["-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null"]
_GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of ``cmd`` stripped, or None when the tool is missing or fails (a missing tool is a fact to record, not an error)."""
    if shutil.which(cmd[0]) is None:
        return None
    if cmd[0] == "git":
        cmd = ["git", *_GIT_SAFE, *cmd[1:]]
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, check=False,
                             env={**os.environ, **_GIT_ENV} if cmd[0] == "git" else None)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit(path: str | Path) -> str | None:
    """The commit checked out where ``path`` lives; when files under ``path`` differ from it (the build loop
    gates a candidate before committing it), ``<sha>+diff:<12 hex>``, a digest of ``git diff HEAD`` and the
    untracked files' names under ``path``, so two gates of the same edit name the same state. None outside git."""
    path = Path(path).resolve()
    cwd = path if path.is_dir() else path.parent
    if _holds_git(cwd):  # a repository of the candidate's own: its config would run its commands (static refuses it)
        return None
    sha = _run(["git", "rev-parse", "HEAD"], cwd=cwd)
    if sha is None:
        return None
    dirty = _run(["git", "status", "--porcelain", "--", "."], cwd=cwd)
    if not dirty:
        return sha
    import hashlib

    diff = _run(["git", "diff", "--no-ext-diff", "--no-textconv", "HEAD", "--", "."], cwd=cwd) or ""
    untracked = _run(["git", "ls-files", "--others", "--exclude-standard", "--", "."], cwd=cwd) or ""
    return f"{sha}+diff:{hashlib.sha256((diff + chr(0) + untracked).encode()).hexdigest()[:12]}"


def _holds_git(folder: Path) -> bool:
    """True when ``folder`` or any folder below it (links not followed) has a ``.git`` entry."""
    return any(".git" in dirs or ".git" in files for _, dirs, files in os.walk(folder))


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``), or ``unknown model``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or "unknown model"


def env_info(engine_dir: str | Path | None = None) -> dict[str, str | None]:
    """The environment line: ``{"gpu", "driver", "torch", "triton", "cuda", "python", "commit", "harness_commit"}``.

    ``gpu`` is ``torch.cuda.get_device_name(0)`` or ``cpu (<model name>, <cores> cores, <machine>)``; ``driver`` comes from
    ``nvidia-smi``; ``commit`` is the git commit of ``engine_dir`` (the engine measured),
    ``harness_commit`` that of this harness. Values that cannot be found are None.
    """
    import torch

    try:
        import triton

        triton_version: str | None = triton.__version__
    except ImportError:
        triton_version = None
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        driver = driver.splitlines()[0] if driver else None
    else:
        gpu, driver = f"cpu ({_cpu_model()}, {os.cpu_count()} cores, {platform.machine()})", None
    harness_dir = Path(__file__).resolve().parent
    return {
        "gpu": gpu,
        "driver": driver,
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "commit": git_commit(engine_dir) if engine_dir is not None else None,
        "harness_commit": git_commit(harness_dir),
    }

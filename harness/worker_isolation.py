"""How a worker process is walled off from the judge: a private mount/PID/network namespace where possible.

Two levels, recorded in the gate JSON (``isolation``):

- ``namespace`` (Linux, root or a user allowed to ``unshare``): the worker runs under
  ``unshare --mount --pid --fork --kill-child --mount-proc --net --ipc``; inside, every mount is
  remounted read-only except the worker's private work folder, ``/dev/shm`` is a fresh tmpfs,
  and all capabilities are dropped (``setpriv``) before Python starts, so the engine cannot
  remount anything writable again. It sees no process of the judge (its own ``/proc``), has no
  network, and every process it starts dies with it (PID namespace).
- ``process``: a plain child process in its own process group with a clean environment; the
  judge's tree, the checkpoint and the verdict file are protected only by the fingerprints the
  judge checks around every stage (a change is a ``tampered`` stage), and a process that leaves
  the group (``setsid`` + double fork) survives the kill.

``METAINFER_ISOLATION=process`` forces the second level (tests of the fallback).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

#: The shell run inside the new namespaces ("$1" = the writable work folder, then the worker's argv).
_BOOT = r"""
set -e
W="$1"; shift
mount --bind "$W" "$W"
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$m" in "$W"|/proc|/proc/*) ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac
done
mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm
if touch /.metainfer-ro-probe 2>/dev/null; then echo "isolation: / is still writable" >&2; exit 97; fi
exec setpriv --bounding-set -all --inh-caps -all --no-new-privs -- "$@"
"""

_UNSHARE = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc",
            "--net", "--ipc"]

LEVELS = ("namespace", "process")


def wrap(argv: list[str], work: Path, level: str) -> list[str]:
    """The command that runs ``argv`` at isolation ``level`` with ``work`` as its only writable folder."""
    if level == "process":
        return argv
    if level != "namespace":
        raise ValueError(f"unknown isolation level {level!r}; known: {', '.join(LEVELS)}")
    return [*_UNSHARE, "--", "sh", "-c", _BOOT, "metainfer-worker", str(work), *argv]


_CUDA_PROBE = "import ctypes, sys; sys.exit(ctypes.CDLL('libcuda.so.1').cuInit(0))"


@functools.lru_cache(maxsize=4)
def detect(cuda: bool = False) -> str:
    """The strongest level that works here (probed once per process by running a command inside it; with
    ``cuda``, the probe also initialises the CUDA driver there, so a namespace that hides the GPU is not chosen).

    ``METAINFER_ISOLATION=process`` forces ``process``.
    """
    forced = os.environ.get("METAINFER_ISOLATION")
    if forced:
        if forced not in LEVELS:
            raise ValueError(f"METAINFER_ISOLATION={forced!r}: use one of {', '.join(LEVELS)}")
        return forced
    if not all(shutil.which(t) for t in ("unshare", "setpriv", "sh", "awk", "mount")):
        return "process"
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="metainfer-probe-") as tmp:
        probe = ["sh", "-c", f"touch {tmp}/ok"]
        if cuda:
            probe = ["sh", "-c", f"touch {tmp}/ok && exec \"$0\" -c \"$1\"", sys.executable, _CUDA_PROBE]
        try:
            proc = subprocess.run(wrap(probe, Path(tmp), "namespace"), capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return "process"
        return "namespace" if proc.returncode == 0 and (Path(tmp) / "ok").exists() else "process"

"""How a worker process is walled off from the judge: a private mount/PID/network namespace where possible.

Two levels, recorded in the gate JSON (``isolation``):

- ``namespace`` (Linux, root or a user allowed to ``unshare``): the worker runs under
  ``unshare --mount --pid --fork --kill-child --mount-proc --net --ipc``; inside, every judge's
  worker folders (``<tmp>/metainfer-workers-*``) are hidden under empty tmpfs mounts but the
  worker's own box (so it cannot read the other engine's copy or tell from folder ages or
  contents which role it has), the work folder is a fresh tmpfs of ``work_bytes()`` (its
  files cannot fill the judge's disk), every other mount is remounted read-only (the engine
  copy too), ``/dev/shm`` is a fresh tmpfs, and all capabilities are dropped (``setpriv``)
  before Python starts, so the engine cannot remount anything writable again. It sees no
  process of the judge (its own ``/proc``), has no network, and every process it starts dies
  with it (PID namespace).
- ``process``: a plain child process in its own process group with a clean environment; the
  judge's tree, the checkpoint and the verdict file are protected only by the fingerprints the
  judge checks around every stage (a change is a ``tampered`` stage), the other worker's folder
  is readable, and a process that leaves the group (``setsid`` + double fork) survives the kill.

At both levels the worker is the OOM killer's first choice (``oom_score_adj`` 1000, which it
cannot lower without capabilities), so a memory blow-up kills the worker (a ``crashed`` stage),
not the judge; and no file it writes, its output log included, may exceed ``FILE_LIMIT_BYTES``
(``RLIMIT_FSIZE``: Python ignores SIGXFSZ, so the write raises ``OSError`` ``EFBIG``).

``METAINFER_ISOLATION=process`` forces the second level (tests of the fallback).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

#: The shell run inside the new namespaces: "$1" the work folder, "$2" its box (the worker's own folder, kept
#: visible), "$3" the folder holding every judge's ``metainfer-workers-*`` folders ('' to hide none), "$4" the work
#: tmpfs size, then the worker's argv.
_BOOT = r"""
set -e
W="$1"; B="$2"; T="$3"; SIZE="$4"; shift 4
echo 1000 > /proc/self/oom_score_adj 2>/dev/null || true
mount -t tmpfs -o size=1m,mode=700 tmpfs /dev/shm
if [ -n "$T" ]; then
  mkdir /dev/shm/box && mount --bind "$B" /dev/shm/box
  S="${B%%/*}"; S="${S%%/*}"
  mount -t tmpfs -o size=64k,mode=700 tmpfs "$S"
  for d in "$T"/metainfer-workers-*; do  # other judges' folders (one may vanish meanwhile: nothing left to hide)
    if [ "$d" != "$S" ] && [ -d "$d" ] && [ ! -L "$d" ]; then mount -t tmpfs -o size=64k,mode=700 tmpfs "$d" 2>/dev/null || true; fi
  done
  mkdir -p "$B" && mount --move /dev/shm/box "$B"
fi
umount /dev/shm
mount -t tmpfs -o "size=$SIZE,mode=700" tmpfs "$W"
mkdir "$W/tmp"
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$m" in "$W"|/proc|/proc/*) ;; *) mount -o remount,bind,ro "$m" 2>/dev/null || true ;; esac
done
mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm
if touch /.metainfer-ro-probe 2>/dev/null; then echo "isolation: / is still writable" >&2; exit 97; fi
cd "$W"
exec prlimit --fsize=%(fsize)d -- setpriv --bounding-set -all --inh-caps -all --no-new-privs -- "$@"
"""

#: ``process`` level: the same OOM preference and file-size limit, nothing else.
_PROCESS_BOOT = r"""
echo 1000 > /proc/self/oom_score_adj 2>/dev/null || true
exec prlimit --fsize=%(fsize)d -- "$@"
"""

#: Largest file a worker may write (its output log, a Triton cache entry), bytes.
FILE_LIMIT_BYTES = 512 * 1024**2
#: Prefix of the judge's per-process worker folders (``harness.worker.session_dir``).
SESSION_PREFIX = "metainfer-workers-"


def work_bytes() -> int:
    """Size of a ``namespace`` worker's work tmpfs: an eighth of the machine's memory, at least 2 GiB (caches and temp
    files of one engine; memory is used only as files are written)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 * 1024**3
    return max(2 * 1024**3, total // 8)


_UNSHARE = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--mount-proc",
            "--net", "--ipc"]

LEVELS = ("namespace", "process")


def wrap(argv: list[str], work: Path, level: str) -> list[str]:
    """The command that runs ``argv`` at isolation ``level`` with ``work`` as its only writable folder.

    When ``work`` lies at ``<tmp>/metainfer-workers-<pid>/<dir>/<box>/work`` (``harness.worker``), every
    ``<tmp>/metainfer-workers-*`` folder but ``<box>`` is hidden from the worker at ``namespace`` level.
    """
    limits = shutil.which("prlimit") is not None
    if level == "process":
        return ["sh", "-c", _PROCESS_BOOT % {"fsize": FILE_LIMIT_BYTES}, "metainfer-worker", *argv] if limits else argv
    if level != "namespace":
        raise ValueError(f"unknown isolation level {level!r}; known: {', '.join(LEVELS)}")
    work = Path(work)
    box, tmp = work.parent, ""
    if len(work.parents) > 3 and work.parents[2].name.startswith(SESSION_PREFIX):
        tmp = str(work.parents[3])
    boot = _BOOT % {"fsize": FILE_LIMIT_BYTES}
    if not limits:
        boot = boot.replace("exec prlimit --fsize=%d -- setpriv" % FILE_LIMIT_BYTES, "exec setpriv")
    return [*_UNSHARE, "--", "sh", "-c", boot, "metainfer-worker", str(work), str(box), tmp, str(work_bytes()), *argv]


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

    with tempfile.TemporaryDirectory(prefix="metainfer-probe-") as tmp:  # the work folder is a tmpfs inside: report on stdout
        probe = ["sh", "-c", "touch ok && echo metainfer-isolation-ok"]
        if cuda:
            probe = ["sh", "-c", "touch ok && echo metainfer-isolation-ok && exec \"$0\" -c \"$1\"", sys.executable, _CUDA_PROBE]
        try:
            proc = subprocess.run(wrap(probe, Path(tmp), "namespace"), capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return "process"
        return "namespace" if proc.returncode == 0 and b"metainfer-isolation-ok" in proc.stdout else "process"

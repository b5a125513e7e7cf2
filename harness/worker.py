"""One engine (or the HF reference, or the static stage's import probe) in a worker process of its own.

The judge never imports engine code: each engine runs in a child process (``harness.worker_main``)
started with a clean environment from a private copy of its folder under a fresh temp dir
(``<tmp>/mi-XXXXXXXX/<8 hex>/engine``, the same shape for candidate and baseline, so an engine
cannot tell its role from its path), its working folder, ``HOME`` and caches in a private
``work`` folder, bytecode writes off and a private ``PYTHONPYCACHEPREFIX`` (no in-tree
``__pycache__`` is read or written). Requests go over a pipe after ``load`` returned; results
come back as plain data (``harness.worker_protocol``: JSON + raw tensor bytes, no pickle).

Every call has a wall-clock limit: a worker that overruns is killed (its whole process group,
or its PID namespace) and the call raises ``WorkerFailure("timeout")``; one that dies raises
``WorkerFailure("crashed")``; both carry the last lines of the worker's output. An exception the
engine raised inside a call is ``EngineError`` (the worker lives on). ``close()`` kills the
worker and removes its private copy; use ``with Worker(...) as w``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import worker_isolation, worker_protocol
from harness.worker_copy import check_copyable, copy_engine

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Environment variables passed on to a worker (plus every ``TRITON_*`` but the cache folder); nothing else.
PASSED_ENV = ("PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
              "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NVIDIA_VISIBLE_DEVICES", "LANG", "LC_ALL")
#: a Triton cache folder every worker of this process shares, for trusted engines only (the mutation suite on the
#: GPU, where each engine load would otherwise recompile every kernel); ``python -m harness.gate`` removes it from
#: its environment, since through a shared cache one worker could plant a compiled kernel that another loads.
SHARED_TRITON_CACHE_ENV = "METAINFER_TRUSTED_TRITON_CACHE"
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".git")


def max_reply_bytes() -> int:
    """A quarter of this machine's physical memory, in bytes (the default cap on one worker reply)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError):
        return 8 * 1024**3


@dataclass(frozen=True)
class WorkerLimits:
    """Wall-clock limits of worker calls, seconds.

    Attributes:
        start_s: process start and imports, until the worker answers ``hello``.
        load_s: ``load`` of an engine or the reference.
        call_s: any other single call (a prefill, a decode step, one ``generate``).
        static_s: the whole static stage (its audited import included).
        stage_s: everything one stage asks of its workers together.
    """

    start_s: float = 120.0
    load_s: float = 300.0
    call_s: float = 300.0
    static_s: float = 300.0
    stage_s: float = 3600.0

    @classmethod
    def for_scale(cls, scale: str) -> WorkerLimits:
        """Defaults for ``cpu`` (tiny engine, shared cores) and ``full`` (full-size model on a GPU).

        Raises:
            ValueError: another scale name.
        """
        if scale == "cpu":
            return cls(start_s=120.0, load_s=300.0, call_s=300.0, static_s=300.0, stage_s=3600.0)
        if scale == "full":
            return cls(start_s=300.0, load_s=1800.0, call_s=900.0, static_s=600.0, stage_s=7200.0)
        raise ValueError(f"unknown scale {scale!r}; use cpu or full")

    def scaled(self, factor: float) -> WorkerLimits:
        """Every limit times ``factor`` (``--worker-timeout-scale``)."""
        return WorkerLimits(*(factor * getattr(self, f) for f in ("start_s", "load_s", "call_s", "static_s", "stage_s")))


class WorkerFailure(RuntimeError):
    """A worker overran its limit (``verdict == "timeout"``) or died (``"crashed"``); it has been killed.

    Attributes:
        verdict: ``timeout`` or ``crashed``.
        stderr_tail: the last lines the worker printed (its stdout and stderr), for the gate JSON.
    """

    def __init__(self, verdict: str, message: str, stderr_tail: str = "") -> None:
        super().__init__(message + (f"; worker output ends with:\n{stderr_tail}" if stderr_tail else ""))
        self.verdict, self.message, self.stderr_tail = verdict, message, stderr_tail


class EngineError(RuntimeError):
    """The code in the worker raised (the engine, or the reference refusing its input); the worker lives on.

    Attributes:
        type_name: the exception's class name in the worker; traceback: its last frames.
    """

    def __init__(self, type_name: str, message: str, traceback: str = "") -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name, self.traceback = type_name, traceback


_SESSION: dict[str, Path] = {}
#: ``(kind, seconds)`` of every worker start-up in this process: spawn to imports done (the isolation's cost).
STARTS: list[tuple[str, float]] = []


def session_dir_of(pid: int) -> Path:
    """The worker-copy folder of the judge process ``pid`` (``<tmp>/metainfer-workers-<pid>``)."""
    return Path(tempfile.gettempdir()) / f"metainfer-workers-{pid}"


def stale_session_dirs() -> list[Path]:
    """Worker-copy folders of judges that are gone (killed before their exit handler ran)."""
    out = []
    for old in Path(tempfile.gettempdir()).glob("metainfer-workers-*"):
        pid = old.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            out.append(old)
    return sorted(out)


def session_dir() -> Path:
    """This judge process's folder for worker copies (``<tmp>/metainfer-workers-<pid>``), made on first use and
    removed at exit; folders left by judges that were killed (their pid gone) are removed on the way."""
    if "dir" not in _SESSION:
        for old in stale_session_dirs():
            shutil.rmtree(old, ignore_errors=True)
        d = session_dir_of(os.getpid())
        d.mkdir(mode=0o700, exist_ok=True)
        import atexit

        atexit.register(shutil.rmtree, d, True)
        _SESSION["dir"] = d
    return _SESSION["dir"]


class Worker:
    """A worker process of one ``kind`` (``engine``, ``reference`` or ``static``).

    Args:
        kind: what the worker serves (see ``harness.worker_main``).
        engine_dir: the engine folder to copy in (``engine`` and ``static``); None for ``reference``.
        limits: call limits; isolation: ``namespace``/``process`` (default: ``worker_isolation.detect()``).
        parent: folder under which the private temp dir is made (default: :func:`session_dir`).
        keep_links: copy symlinks as links (the static stage must see them), else copy what they point to.

    Raises:
        harness.worker_copy.CopyError: ``engine_dir`` holds what a copy would blow up (a sparse giant file, a link to
            a device, a loop of links); nothing was copied or started.
    """

    def __init__(self, kind: str, *, engine_dir: str | Path | None = None, limits: WorkerLimits | None = None,
                 isolation: str | None = None, parent: Path | None = None, keep_links: bool = False) -> None:
        self.kind = kind
        self.limits = limits or WorkerLimits()
        self.isolation = isolation or worker_isolation.detect(cuda=_has_cuda())
        self.root = Path(tempfile.mkdtemp(prefix="mi-", dir=parent or session_dir())).resolve()
        self.proc: subprocess.Popen | None = None
        self._wfd = self._rfd = -1
        self.calls = 0
        self._hello: float | None = None
        self._limit_s = 0.0
        self._spawned_at = 0.0
        self._failure: WorkerFailure | None = None
        #: cap on one reply's bytes (a quarter of the machine's memory): a worker cannot make the judge allocate more
        self.max_reply_bytes: int = max_reply_bytes()
        #: seconds from spawn until the worker's imports were done (None until it answered)
        self.start_s: float | None = None
        #: absolute ``time.monotonic()`` by which the current stage must be done; caps every call's limit
        self.stage_deadline: float | None = None
        try:
            box = self.root / secrets.token_hex(4)
            self.work = box / "work"
            (self.work / "tmp").mkdir(parents=True)
            self.engine_dir = None
            if engine_dir is not None:
                self.engine_dir = box / "engine"
                ignore = None if keep_links else _COPY_IGNORE
                check_copyable(engine_dir, follow_links=not keep_links, ignore=ignore)  # a sparse TiB is refused, not written
                copy_engine(engine_dir, self.engine_dir, symlinks=keep_links, ignore=ignore)  # bytes, not metadata
            self.log_path = box / "output.log"
            self._start()
        except BaseException:
            self.close()
            raise

    def _env(self) -> dict[str, str]:
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env |= {k: v for k, v in os.environ.items() if k.startswith("TRITON_")}
        w = str(self.work)
        triton_cache = os.environ.get(SHARED_TRITON_CACHE_ENV) or f"{w}/triton"
        env |= {"HOME": w, "TMPDIR": f"{w}/tmp", "TRITON_CACHE_DIR": triton_cache, "TORCHINDUCTOR_CACHE_DIR": f"{w}/inductor",
                "XDG_CACHE_HOME": f"{w}/cache", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": f"{w}/pycache",
                "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
                "PYTHONUNBUFFERED": "1", "PYTHONNOUSERSITE": "1"}
        return env

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        argv = [sys.executable, "-B", "-X", f"pycache_prefix={self.work}/pycache", "-m", "harness.worker_main",
                str(to_child_r), str(from_child_w)]
        self._spawned_at = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(worker_isolation.wrap(argv, self.work, self.isolation), cwd=self.work,
                                         env=self._env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         pass_fds=(to_child_r, from_child_w), start_new_session=True,
                                         preexec_fn=_die_with_parent)
        os.close(to_child_r)
        os.close(from_child_w)
        self._wfd, self._rfd = to_child_w, from_child_r
        os.set_blocking(self._wfd, False)
        self._hello = self.send("hello", timeout=self.limits.start_s, kind=self.kind)  # answered on the first call

    def ready(self) -> None:
        """Wait for the worker's start-up (imports) to finish; the first call does this by itself."""
        if self._hello is not None:
            deadline, self._hello = self._hello, None
            info = self.receive("start", deadline)
            ready_at = info.get("ready_at") if isinstance(info, dict) else None
            if isinstance(ready_at, (int, float)):
                self.start_s = max(0.0, float(ready_at) - self._spawned_at)
                STARTS.append((self.kind, round(self.start_s, 3)))

    def tail(self, lines: int = 20, max_bytes: int = 8192) -> str:
        """The last ``lines`` lines of what the worker printed ('' when nothing)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max_bytes))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def send(self, op: str, *, timeout: float | None = None, pipelined: bool = False, **args: Any) -> float:
        """Send one request; returns its deadline (``time.monotonic()`` seconds) for :meth:`receive`.

        ``pipelined``: send without first waiting for the start-up reply (the caller then calls
        :meth:`ready` before :meth:`receive`); the request waits in the pipe until the imports are done.
        """
        if self.proc is None:  # killed earlier: a later call (a cleanup in a finally) repeats why, not "closed"
            raise self._failure or WorkerFailure("crashed", f"{self.kind} worker is closed")
        if op != "hello" and not pipelined:
            self.ready()
        timeout = self.limits.call_s if timeout is None else timeout
        deadline = time.monotonic() + timeout
        if self.stage_deadline is not None and self.stage_deadline < deadline:
            deadline, timeout = self.stage_deadline, round(self.stage_deadline - time.monotonic(), 1)
        try:
            worker_protocol.send(self._wfd, {"op": op, "args": args}, deadline)
        except TimeoutError:
            self._fail("timeout", f"{op}: the {self.kind} worker did not take the request within {timeout} s")
        except OSError:
            self._fail("crashed", f"{op}: the {self.kind} worker is gone (exit status {self.proc.poll()})")
        self.calls += 1
        self._limit_s = timeout
        return deadline

    def receive(self, op: str, deadline: float) -> Any:
        """The reply to the request sent last; raises ``EngineError`` when the call raised in the worker."""
        assert self.proc is not None
        try:
            reply = worker_protocol.recv(self._rfd, deadline, max_bytes=self.max_reply_bytes)
        except TimeoutError:
            self._fail("timeout", f"{op}: the {self.kind} worker ran past its limit of {self._limit_s:.0f} s and was killed")
        except EOFError:
            try:
                rc = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = None
            self._fail("crashed", f"{op}: the {self.kind} worker died (exit status {rc})")
        except (worker_protocol.ProtocolError, ValueError, OSError) as err:
            self._fail("crashed", f"{op}: the {self.kind} worker sent a malformed reply ({err})")
        if not isinstance(reply, dict) or "ok" not in reply:
            self._fail("crashed", f"{op}: the {self.kind} worker sent a malformed reply")
        if not reply["ok"]:  # each part cut as the worker cuts it: a worker that did not is not trusted to have
            raise EngineError(str(reply.get("type"))[:300], str(reply.get("error"))[:4300], str(reply.get("traceback") or "")[-6000:])
        return reply.get("result")

    def call(self, op: str, *, timeout: float | None = None, **args: Any) -> Any:
        """``op(**args)`` in the worker, within ``timeout`` seconds (default ``limits.call_s``)."""
        return self.receive(op, self.send(op, timeout=timeout, **args))

    def _fail(self, verdict: str, message: str) -> None:
        tail = self.tail()
        self.kill()
        self._failure = WorkerFailure(verdict, message, tail)
        raise self._failure

    def kill(self) -> None:
        """SIGKILL the worker's process group (with it, at ``namespace`` isolation, its PID namespace) and reap it."""
        if self.proc is None:
            return
        from harness.worker_procs import kill_all

        try:
            kill_all(self.proc.pid, self.isolation)  # stopped to a fixpoint first: a fork chain cannot outrun it
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # and whatever is left of the group
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self._wfd, self._rfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wfd = self._rfd = -1
        self.proc = None

    def close(self) -> None:
        """Kill the worker and remove its private folder (idempotent)."""
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the judge dies (Linux ``PR_SET_PDEATHSIG``)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)

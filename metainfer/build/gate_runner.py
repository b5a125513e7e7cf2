"""Run the frozen gate (``python -m harness.gate``) in a subprocess with a timeout.

The gate runs from the repository root (the judge is the checkout's ``harness/``, never the
worktree's copy the agent could edit), writes its log to ``gate.log`` as it goes and its
result to ``gate.json`` (schema 2, ``harness.result.GateResult``; docs/CONTRACTS.md "The gate"). The judge runs
with bytecode writes off and a private empty ``PYTHONPYCACHEPREFIX`` (``judge_env``), so bytecode an
engine left in the checkout's ``__pycache__`` is never loaded. A timeout kills the
whole process group and is a red gate, never an exception: the loop records it as a
rejected iteration.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.result import GateResult
from metainfer.tempdirs import mkdtemp


@dataclass(frozen=True)
class GateRequest:
    """One gate invocation.

    Attributes:
        engine: candidate engine folder (``.../generated/<target>``).
        baseline: best engine folder to race against (may equal ``engine`` for the baseline's noise run).
        checkpoint: checkpoint folder.
        gpu: GPU profile name.
        seed: seed of the gate's inputs (recorded in its JSON).
        stages: stage names in order; None: the gate's default for the device (on a GPU it adds the advisory
            ``profile`` stage after bench).
        rounds: A/B rounds, or None for the gate's default.
        scale: ``cpu`` or ``full``, or None for the gate's default.
        workloads: benchmark workload names, or None for the gate's default.
        timeout_s: seconds before the process group is killed.
        parity_lengths, parity_steps: the gate's quick-parity flags (``--parity-lengths`` / ``--parity-steps``);
            None: the gate's full parity set for the device (an upgrade may set them; ``run.json`` ``gate`` keeps them).
        twin_engine, twin_periods: the candidate's shallow twin (``metainfer.twin.make_twin``) and its layer periods
            (passed only with ``twin_engine``); given, the gate adds its ``twin`` stage to the default stages
            (docs/PARITY.md, "A float32 twin pass").
    """

    engine: Path
    baseline: Path
    checkpoint: Path
    gpu: str
    seed: int
    stages: tuple[str, ...] | None = None
    rounds: int | None = None
    scale: str | None = None
    workloads: tuple[str, ...] | None = None
    timeout_s: float = 3600.0
    parity_lengths: tuple[int, ...] | None = None
    parity_steps: int | None = None
    twin_engine: Path | None = None
    twin_periods: int = 1

    def argv(self, json_out: Path) -> list[str]:
        """The command line of the gate subprocess."""
        argv = [sys.executable, "-m", "harness.gate", "--engine", str(self.engine), "--checkpoint", str(self.checkpoint),
                "--baseline", str(self.baseline), "--gpu", self.gpu, "--seed", str(self.seed), "--json", str(json_out)]
        if self.stages:
            argv += ["--stages", ",".join(self.stages)]
        if self.rounds is not None:
            argv += ["--rounds", str(self.rounds)]
        if self.scale is not None:
            argv += ["--scale", self.scale]
        if self.workloads:
            argv += ["--workloads", ",".join(self.workloads)]
        if self.parity_lengths:
            argv += ["--parity-lengths", ",".join(str(n) for n in self.parity_lengths)]
        if self.parity_steps is not None:
            argv += ["--parity-steps", str(self.parity_steps)]
        if self.twin_engine is not None:
            argv += ["--twin-engine", str(self.twin_engine), "--twin-periods", str(self.twin_periods)]
        return argv


@dataclass
class GateOutcome:
    """What came back from one gate subprocess.

    Attributes:
        result: the gate JSON (schema 1), or a stand-in ``{"ok": False, "error": ...}`` when none was written.
        returncode: exit status (None after a timeout kill).
        timed_out: the gate ran past its timeout and was killed.
        seconds: wall time of the subprocess.
        error: why the gate is red when it did not say so itself (timeout, crash, unreadable JSON), else None.
        argv: the gate's command line.
    """

    result: dict[str, Any]
    returncode: int | None
    timed_out: bool
    seconds: float
    error: str | None = None
    argv: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True only for a green gate with a readable result."""
        return self.error is None and bool(self.result.get("ok"))

    @property
    def gate(self) -> GateResult:
        """The gate JSON as a typed ``harness.result.GateResult`` (the stand-in record when the gate wrote none)."""
        return GateResult.from_json(self.result)


def judge_env(pycache_prefix: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a judge process: bytecode writes off and a private, empty ``PYTHONPYCACHEPREFIX``, so the
    judge never loads (possibly poisoned) ``__pycache__`` bytecode from the checkout."""
    env = {**(os.environ if base is None else base), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPYCACHEPREFIX": pycache_prefix}
    env.setdefault("METAINFER_LOG", "INFO")  # the parity stage's progress lines, into gate.log (``PROGRESS_MARK``)
    return env


#: gate.log lines carrying the judge's progress within a stage (``harness.parity`` at INFO): ``on_progress`` gets them
PROGRESS_MARK = " harness.parity: "


def _report_progress(log_path: Path, offset: int, on_progress: Callable[[str], None] | None) -> int:
    """Pass each new complete ``PROGRESS_MARK`` line of ``log_path`` after byte ``offset`` to ``on_progress`` (the text
    after the mark); returns the offset read up to."""
    if on_progress is None:
        return offset
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return offset
    end = chunk.rfind(b"\n") + 1
    for line in chunk[:end].decode("utf-8", "replace").splitlines():
        if PROGRESS_MARK in line:
            on_progress(line.split(PROGRESS_MARK, 1)[1].strip())
    return offset + end


def run_gate(req: GateRequest, cwd: Path, json_out: Path, log_path: Path,
             on_start: Callable[[int], None] | None = None,
             on_stage: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
             on_progress: Callable[[str], None] | None = None) -> GateOutcome:
    """Run the gate for ``req`` with ``cwd`` as the working folder; stdout and stderr go to ``log_path``.

    ``on_start(pid)`` is called once the subprocess exists (the loop saves the pid so that a
    resumed run can stop a gate orphaned by a killed loop). On Linux the gate also gets
    SIGKILL when the loop process dies (``PR_SET_PDEATHSIG``). ``on_stage(stage, result)`` is
    called once per finished stage, as it finishes (the gate rewrites its JSON after every stage);
    ``on_progress(text)`` once per progress line within a stage (``PROGRESS_MARK``), as the gate writes it.

    Returns a ``GateOutcome``; never raises for a red, crashed or timed-out gate (only for
    an unwritable ``log_path`` or a missing Python interpreter, which are the caller's bugs).
    """
    json_out.unlink(missing_ok=True)
    argv = req.argv(json_out)
    pycache = str(mkdtemp("judge-pycache", cwd))
    env = judge_env(pycache)
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=_die_with_parent)
        seen, offset = 0, len(("$ " + " ".join(argv) + "\n").encode())
        rc: int | None = None
        timed_out = False
        try:
            if on_start is not None:  # inside the try: a Ctrl-C while it saves the pid still takes the gate down
                on_start(proc.pid)
            while True:
                try:
                    rc = proc.wait(timeout=_POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() - t0 > req.timeout_s:
                        _kill_group(proc)
                        rc, timed_out = None, True
                        break
                offset = _report_progress(log_path, offset, on_progress)  # a stage's progress before its end
                seen = _report_stages(json_out, seen, on_stage)
        except BaseException:  # KeyboardInterrupt or the loop being killed: take the gate down with us
            _kill_group(proc)
            shutil.rmtree(pycache, ignore_errors=True)
            raise
    seconds = time.monotonic() - t0
    shutil.rmtree(pycache, ignore_errors=True)
    _report_progress(log_path, offset, on_progress)
    _report_stages(json_out, seen, on_stage)
    if timed_out:
        msg = f"gate timed out after {req.timeout_s:.0f}s and was killed"
        with open(log_path, "a") as log:
            log.write(f"\n[metainfer] {msg}\n")
        try:  # the gate rewrites its JSON after every stage: keep what it had
            partial = json.loads(json_out.read_text())
        except (OSError, ValueError):
            partial = {"schema": 1, "stages": []}
        partial.update({"ok": False, "error": msg})
        json_out.write_text(json.dumps(partial, indent=2) + "\n")
        return GateOutcome(partial, None, True, seconds, msg, argv)
    try:
        result = json.loads(json_out.read_text())
    except FileNotFoundError:
        msg = f"gate exited with status {rc} without writing {json_out.name}; see gate.log"
        return GateOutcome({"schema": 1, "ok": False, "error": msg, "stages": []}, rc, False, seconds, msg, argv)
    except json.JSONDecodeError as err:
        msg = f"gate wrote unreadable JSON ({err}); see gate.log"
        return GateOutcome({"schema": 1, "ok": False, "error": msg, "stages": []}, rc, False, seconds, msg, argv)
    error = None
    if rc not in (0, 1):
        error = f"gate exited with status {rc}; see gate.log"
    elif bool(result.get("ok")) != (rc == 0):
        error = f"gate exit status {rc} contradicts its JSON ok={result.get('ok')}; treated as red"
    return GateOutcome(result, rc, False, seconds, error, argv)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the gate's process group (the gate and anything it started), reap it, and remove the worker copies
    the killed gate could not remove itself (``harness.worker.session_dir``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    from harness.worker import session_dir_of

    shutil.rmtree(session_dir_of(proc.pid), ignore_errors=True)


_POLL_S = 0.5


def _report_stages(json_out: Path, seen: int, on_stage) -> int:
    """Call ``on_stage`` for the stages the gate JSON lists beyond the first ``seen``; return the new count."""
    if on_stage is None:
        return seen
    try:
        result = json.loads(json_out.read_text())
    except (OSError, ValueError):  # not written yet, or caught mid-rename
        return seen
    stages = result.get("stages") or []
    for st in stages[seen:]:
        on_stage(st, result)
    return max(seen, len(stages))


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGKILL it when the parent dies (no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def kill_orphan(pid: int) -> bool:
    """SIGKILL the process group of a gate left running by a killed loop; True if one was found.

    Checks ``/proc/<pid>/cmdline`` names ``harness.gate`` first, so a reused pid is left alone.
    """
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if b"harness.gate" not in cmdline:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True

"""The processes of one worker, found through ``/proc``, to pause (SIGSTOP/SIGCONT) or kill them all.

During the A/B bench the idle engine's worker is paused while the other is timed, so nothing it
left running (a forked child, a thread, a busy loop) can steal CPU or GPU time from the engine
on the clock. At ``namespace`` isolation a worker's processes are every process in its PID
namespace (found by the ``/proc/<pid>/ns/pid`` link, which ``setsid`` or a double fork cannot
leave); at ``process`` isolation its descendants and its process group.

A pid list read from ``/proc`` is stale as soon as it is read: a process that forks a successor and exits
every few milliseconds would dodge one ``SIGSTOP`` sweep (it did in 8 of 10 pauses), and a sweep that takes
longer than a hop never catches the live one. :func:`stop_all` therefore signals the worker's process group
first (one kernel operation that a fork in progress cannot slip past: the kernel restarts a fork that a group
signal interrupts), then sweeps for processes that left the group until a fixpoint: every process found is
stopped (state ``T`` in ``/proc/<pid>/stat``, so none is mid-fork) and one more listing finds nobody new.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Iterator


def _ppids() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                out[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def _ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def members(root_pid: int, isolation: str) -> list[int]:
    """Pids of the worker started as ``root_pid`` (the ``unshare`` or the Python process), root included."""
    ppids = _ppids()
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {root_pid}, [root_pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    if isolation == "namespace":
        own = _ns(os.getpid())
        spaces = {_ns(p) for p in found if p != root_pid} - {None, own}
        if spaces:
            found |= {p for p in ppids if _ns(p) in spaces}
    else:
        for pid in ppids:
            try:
                if os.getpgid(pid) == root_pid:
                    found.add(pid)
            except OSError:
                continue
    return sorted(found)


def signal_all(pids: list[int], sig: int) -> None:
    """Send ``sig`` to each pid that still exists."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue


def _state(pid: int) -> str | None:
    """The one-letter state of ``pid`` (``R``, ``S``, ``T``, ``Z``...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 :].split()[0].decode()
    except (OSError, ValueError, IndexError):
        return None


def stop_all(root_pid: int, isolation: str, timeout_s: float = 2.0) -> list[int]:
    """SIGSTOP every process of the worker started as ``root_pid`` until a fixpoint (module docstring); returns the pids
    stopped (to SIGCONT later). Past ``timeout_s`` (a fork storm) it returns what it stopped so far."""
    import time

    stopped: set[int] = set()
    try:
        os.killpg(root_pid, signal.SIGSTOP)  # atomic for the whole group (the worker is started in a session of its own)
    except (ProcessLookupError, PermissionError):
        pass
    if isolation == "namespace":
        signal_namespace(root_pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = [p for p in members(root_pid, isolation) if p not in stopped]
        signal_all(new, signal.SIGSTOP)
        stopped.update(new)
        if new:
            continue
        running = [p for p in stopped if _state(p) not in (None, "T", "t", "Z", "X")]
        if not running:
            if not [p for p in members(root_pid, isolation) if p not in stopped]:
                break
            continue
        time.sleep(0.0005)
    return sorted(stopped)


def signal_namespace(root_pid: int, sig: int) -> bool:
    """``kill(-1, sig)`` from inside the PID namespace of the worker started as ``root_pid`` (``nsenter``): every process
    there but its init, in one kernel operation that a fork in progress cannot slip past (a process that left the
    group with ``setsid`` included). False when there is no such namespace or ``nsenter`` is missing."""
    import shutil
    import subprocess

    own = _ns(os.getpid())
    init = next((p for p, pp in _ppids().items() if pp == root_pid and _ns(p) not in (None, own)), None)
    if init is None or shutil.which("nsenter") is None:
        return False
    try:
        proc = subprocess.run(["nsenter", "--target", str(init), "--pid", "--", "kill", f"-{int(sig)}", "--", "-1"],
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def kill_all(root_pid: int, isolation: str) -> None:
    """SIGKILL every process of the worker started as ``root_pid``: stopped first (:func:`stop_all`, so a fork chain
    cannot outrun the sweep), then killed."""
    signal_all(stop_all(root_pid, isolation), signal.SIGKILL)
    try:
        os.killpg(root_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    signal_all(members(root_pid, isolation), signal.SIGKILL)


@contextmanager
def paused(workers: list) -> Iterator[None]:
    """SIGSTOP every process of each ``harness.worker.Worker`` in ``workers`` for the block (:func:`stop_all`), SIGCONT after."""
    stopped: list[tuple[int, str, list[int]]] = []
    try:
        for w in workers:
            if w.proc is not None:
                stopped.append((w.proc.pid, w.isolation, stop_all(w.proc.pid, w.isolation)))
        yield
    finally:
        for root, isolation, pids in stopped:
            if isolation == "namespace":
                signal_namespace(root, signal.SIGCONT)
            signal_all(pids, signal.SIGCONT)
            try:
                os.killpg(root, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass

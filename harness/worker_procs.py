"""The processes of one worker, found through ``/proc``, to pause (SIGSTOP/SIGCONT) or kill them all.

During the A/B bench the idle engine's worker is paused while the other is timed, so nothing it
left running (a forked child, a thread, a busy loop) can steal CPU or GPU time from the engine
on the clock. At ``namespace`` isolation a worker's processes are every process in its PID
namespace (found by the ``/proc/<pid>/ns/pid`` link, which ``setsid`` or a double fork cannot
leave); at ``process`` isolation its descendants and its process group.

A pid list read from ``/proc`` is stale as soon as it is read: a process that forks a successor and exits
every few milliseconds would dodge one ``SIGSTOP`` sweep. :func:`stop_all` therefore sweeps until a fixpoint:
every process found is stopped (state ``T`` in ``/proc/<pid>/stat``, so none is mid-fork) and one more listing
finds nobody new.
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


def kill_all(root_pid: int, isolation: str) -> None:
    """SIGKILL every process of the worker started as ``root_pid``: stopped first (:func:`stop_all`, so a fork chain
    cannot outrun the sweep), then killed."""
    signal_all(stop_all(root_pid, isolation), signal.SIGKILL)
    signal_all(members(root_pid, isolation), signal.SIGKILL)


@contextmanager
def paused(workers: list) -> Iterator[None]:
    """SIGSTOP every process of each ``harness.worker.Worker`` in ``workers`` for the block (:func:`stop_all`), SIGCONT after."""
    stopped = []
    try:
        for w in workers:
            if w.proc is not None:
                stopped.append(stop_all(w.proc.pid, w.isolation))
        yield
    finally:
        for pids in stopped:
            signal_all(pids, signal.SIGCONT)

"""Import an engine once under an audit hook and report what its module-level code touched.

The static stage's dynamic half: "no file outside the engine folder read at module level
other than the checkpoint; nothing written; no process, no network". A Python audit hook
(PEP 578) sees every ``open``, file-system change, ``subprocess.Popen``, ``os.system`` and
socket event; an event counts against the engine when the nearest engine frame on the stack
is closer than the nearest import-machinery frame (so ``import torch`` in the engine does not
charge torch's own file reads to the engine, but ``numpy.load(path)`` called by it does).
Audit hooks cannot be removed, so one hook is installed per process and only acts while a
probe is running.
"""

from __future__ import annotations

import os
import site
import sys
import threading
from pathlib import Path

from harness.engine_loader import import_engine
from harness.static_ast import Finding

_WRITE_EVENTS = {"os.remove", "os.rename", "os.replace", "os.mkdir", "os.rmdir", "os.symlink", "os.link",
                 "os.truncate", "os.chmod", "shutil.rmtree", "shutil.move", "shutil.copyfile", "os.chown"}
_PROCESS_EVENTS = {"subprocess.Popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.fork", "os.startfile"}
_NET_EVENTS = {"socket.connect", "socket.getaddrinfo", "socket.bind", "socket.sendto", "urllib.Request"}
_lock = threading.Lock()
_state: dict = {"probe": None, "busy": False}


class _Probe:
    def __init__(self, engine_dir: Path, checkpoint_dir: Path | None) -> None:
        self.engine_dir = engine_dir
        roots = [engine_dir, Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
                 Path("/proc"), Path("/sys"), Path("/dev"), Path("/usr"), Path(__file__).resolve().parents[1] / "metainfer"]
        roots += [Path(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
        if checkpoint_dir is not None:
            roots.append(checkpoint_dir)
        self.read_roots = [r.resolve() for r in roots]
        self.findings: list[Finding] = []

    def engine_frame(self):
        """The engine frame that caused the current event, or None when an import (or no engine code) sits in between."""
        f = sys._getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith("<frozen importlib"):
                return None
            if name.startswith(str(self.engine_dir) + os.sep):
                return f
            f = f.f_back
        return None

    def allowed_read(self, path: Path) -> bool:
        return any(path == r or r in path.parents for r in self.read_roots)

    def event(self, event: str, args: tuple) -> None:
        kind = None
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = Path(os.fsdecode(args[0])).resolve()
            mode, flags = (args[1] or "r"), (args[2] if len(args) > 2 and isinstance(args[2], int) else 0)
            writes = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            if writes:
                kind = ("file-write", f"writes {path} at import: an engine writes no files")
            elif not self.allowed_read(path):
                kind = ("import-read", f"reads {path} at import: outside the engine folder and the checkpoint")
        elif event in _WRITE_EVENTS or event.startswith("shutil."):
            kind = ("file-write", f"{event}{args[:2]!r} at import: an engine changes no files")
        elif event in _PROCESS_EVENTS or event.startswith(("os.exec", "os.spawn")):
            kind = ("process", f"starts a process at import ({event})")
        elif event in _NET_EVENTS:
            kind = ("network", f"uses the network at import ({event} {args[:2]!r})")
        if kind is None:
            return
        frame = self.engine_frame()
        if frame is not None:
            rel = Path(frame.f_code.co_filename).relative_to(self.engine_dir).as_posix()
            self.findings.append(Finding(rel, frame.f_lineno, kind[0], kind[1]))


def _hook(event: str, args: tuple) -> None:
    probe = _state["probe"]
    if probe is None or _state["busy"]:
        return
    _state["busy"] = True
    try:
        probe.event(event, args)
    finally:
        _state["busy"] = False


def probe_import(engine_dir: str | Path, checkpoint_dir: str | Path | None = None) -> list[Finding]:
    """Import ``<engine_dir>/engine`` (fresh module name) with the audit hook on; return the findings.

    An exception raised by the import itself is one ``import-error`` finding naming the
    exception, so a broken engine is a red static stage, not a crashed gate.
    """
    engine_dir = Path(engine_dir).resolve()
    probe = _Probe(engine_dir, Path(checkpoint_dir).resolve() if checkpoint_dir else None)
    with _lock:
        if not _state.get("installed"):
            sys.addaudithook(_hook)
            _state["installed"] = True
        _state["probe"] = probe
        writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # the engine folder stays as it was
        try:
            import_engine(engine_dir)
        except (ImportError, AttributeError, FileNotFoundError, SyntaxError, ValueError, RuntimeError, TypeError, NameError, OSError) as err:
            probe.findings.append(Finding("engine/__init__.py", None, "import-error", f"importing the engine failed: {type(err).__name__}: {err}"))
        finally:
            _state["probe"] = None
            sys.dont_write_bytecode = writes_bytecode
    return probe.findings

"""What an attempt declares, and how the attempts are found.

A cheat module (``tests/cheats/<name>.py``) defines ``DESCRIPTION``, ``CLASS``, ``STAGE``,
``REASON``, ``apply(engine_dir)`` and optionally ``VERDICT``, ``BASELINE``, ``RUNS``, ``NOTE``.
An honest module (``tests/honest/<name>.py``) defines ``DESCRIPTION`` and ``apply(engine_dir)``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from metainfer.errors import MetainferError

#: Where a cheat must be stopped: a red stage by name, any red stage, or anything but an acceptance.
STAGES = ("static", "parity", "bench", "any-red", "not-accepted")
VERDICTS = ("fail", "timeout", "crashed", "tampered")
CLASSES = ("precision", "serving", "in-process", "bench", "static", "hang", "honest")


class AttemptError(MetainferError):
    """An attempt module does not declare what the table needs."""


@dataclass(frozen=True)
class Attempt:
    """One attempt on the judge.

    Attributes:
        name: the module name (``forge_verdict``).
        honest: True for an honest edit (must be accepted or judged not faster).
        klass: one of ``CLASSES`` (issue 10's families; ``honest`` for honest edits).
        description: one line: what the engine does.
        stage: one of ``STAGES``: where a cheat must be stopped (``not-accepted`` for honest edits).
        reason: a case-insensitive substring the red stage's error must contain ('' for none).
        verdict: the red stage's expected verdict (``VERDICTS``), or None for any.
        baseline: ``honest`` (the rendered engine) or ``self`` (the attempt's own engine, as after an earlier acceptance).
        runs: gate runs in a row on the same judge copy (the last one is judged; 2 for a cheat that poisons the next gate).
        apply: edits a copy of the rendered tiny engine in place.
        old_gate: what it did to the in-process gate before issue 10 (``OLD_GATE``, recorded by hand), '' if unknown.
        open: ``OPEN``: why this cheat is known to get past where it should be stopped (a hole with an owner), or ''.
            The table still runs and shows it; the CI test expects it to fail until the hole is closed.
    """

    name: str
    honest: bool
    klass: str
    description: str
    stage: str
    reason: str
    verdict: str | None
    baseline: str
    runs: int
    apply: Callable[[Path], None]
    old_gate: str = ""
    open: str = ""

    @property
    def expected(self) -> str:
        """The table's 'expected' cell: ``accepted|not-faster`` or ``<stage>[:verdict]``."""
        if self.honest:
            return "accept|not-faster"
        return self.stage + (f":{self.verdict}" if self.verdict else "")


def _from_module(mod: ModuleType, honest: bool) -> Attempt:
    name = mod.__name__.rsplit(".", 1)[-1]
    get = lambda key, default=None: getattr(mod, key, default)  # noqa: E731
    a = Attempt(name=name, honest=honest, klass="honest" if honest else get("CLASS", ""), description=get("DESCRIPTION", ""),
                stage="not-accepted" if honest else get("STAGE", ""), reason="" if honest else get("REASON", ""),
                verdict=get("VERDICT"), baseline=get("BASELINE", "honest"), runs=int(get("RUNS", 1)), apply=get("apply"),
                old_gate=get("OLD_GATE", ""), open=get("OPEN", ""))
    problems = [f"{k}={v!r} not in {allowed}" for k, v, allowed in
                (("CLASS", a.klass, CLASSES), ("STAGE", a.stage, STAGES), ("BASELINE", a.baseline, ("honest", "self")))
                if v not in allowed]
    if a.verdict is not None and a.verdict not in VERDICTS:
        problems.append(f"VERDICT={a.verdict!r} not in {VERDICTS}")
    if not a.description or not callable(a.apply) or a.runs < 1:
        problems.append("needs DESCRIPTION, apply(engine_dir) and RUNS >= 1")
    if problems:
        raise AttemptError(f"{mod.__file__}: {'; '.join(problems)}; see metainfer/attempts/spec.py")
    return a


def discover(root: Path, only: list[str] | None = None) -> list[Attempt]:
    """The cheats (``<root>/tests/cheats``) then the honest edits (``<root>/tests/honest``), each in name order.

    Args:
        root: the repository root.
        only: attempt names to keep (all when None or empty).
    Raises:
        AttemptError: a module lacks a declaration, or a name in ``only`` is unknown (the message lists the names).
    """
    tests = root / "tests"
    if not (tests / "cheats" / "__init__.py").is_file():
        raise AttemptError(f"no tests/cheats package under {root}; pass --root <repository root>")
    if str(tests) not in sys.path:
        sys.path.insert(0, str(tests))
    out: list[Attempt] = []
    for package, honest in (("cheats", False), ("honest", True)):
        pkg = importlib.import_module(package)
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
            if not info.name.startswith("_"):
                out.append(_from_module(importlib.import_module(f"{package}.{info.name}"), honest))
    if only:
        unknown = sorted(set(only) - {a.name for a in out})
        if unknown:
            raise AttemptError(f"unknown attempts {unknown}; known: {', '.join(a.name for a in out)}")
        out = [a for a in out if a.name in only]
    return out

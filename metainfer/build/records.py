"""Run records: ``runs/<run-id>/run.json`` and one ``iter-NNN/`` folder per iteration.

Layout (docs/CONTRACTS.md "Run records"): ``run.json`` holds the run's options, status and
resume state (which iteration is next, which is in flight, the best commit so far); each
``iter-NNN/`` holds ``report.json`` (written last: its presence marks the iteration done),
``report.md``, ``candidate.diff``, ``gate.json``, ``gate.log``, ``transcript.json``.
Every file is written atomically (temp file + rename), so a killed run leaves either the
old or the new version, never half a file.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from metainfer.build.config import BuildError

SCHEMA = 1


def utc_now() -> str:
    """The current UTC time as ISO 8601 with seconds (``2026-11-30T14:05:09Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunRecord:
    """One run folder and its ``run.json`` state.

    Attributes:
        path: ``runs/<run-id>``.
        state: the contents of ``run.json`` (saved with ``save``).
    """

    def __init__(self, path: Path, state: dict[str, Any]):
        self.path = Path(path)
        self.state = state

    @property
    def run_id(self) -> str:
        """The run's id, also its folder name."""
        return self.state["run_id"]

    @classmethod
    def create(cls, runs_dir: Path, target_name: str, meta: dict[str, Any]) -> "RunRecord":
        """Make ``runs_dir/<UTC time>-<target>`` (suffixed ``-2``, ``-3`` if taken) with a fresh ``run.json``."""
        runs_dir.mkdir(parents=True, exist_ok=True)
        base = f"{datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S')}-{target_name}"
        run_id, n = base, 1
        while True:
            try:
                (runs_dir / run_id).mkdir()
                break
            except FileExistsError:
                n += 1
                run_id = f"{base}-{n}"
        state = {"schema": SCHEMA, "run_id": run_id, "target": target_name, **meta, "status": "running",
                 "stop_reason": None, "started": utc_now(), "ended": None, "next_iteration": 0,
                 "in_flight": None, "best": None, "baseline": None, "cost_usd": 0.0, "active_seconds": 0.0}
        rec = cls(runs_dir / run_id, state)
        rec.save()
        return rec

    @classmethod
    def open(cls, runs_dir: Path, run: str) -> "RunRecord":
        """Open an existing run by path, by id (a folder in ``runs_dir``) or by a unique part of its id.

        Raises:
            BuildError: no such run folder, several runs match, or its ``run.json`` is missing, damaged (not JSON) or of
                another schema.
        """
        path = Path(run)
        if not (path / "run.json").is_file():
            path = runs_dir / run
        if not (path / "run.json").is_file() and runs_dir.is_dir() and "/" not in run:
            matches = sorted(p.parent for p in runs_dir.glob(f"*{run}*/run.json"))
            if len(matches) == 1:  # a unique part of a run id (its time stamp, or the target) is enough
                path = matches[0]
            elif len(matches) > 1:
                raise BuildError(f"{run!r} matches {len(matches)} runs in {runs_dir}: "
                                 f"{', '.join(m.name for m in matches[-5:])}; give more of the run id")
        f = path / "run.json"
        if not f.is_file():
            known = sorted(p.parent.name for p in runs_dir.glob("*/run.json")) if runs_dir.is_dir() else []
            raise BuildError(f"no run {run!r} (looked for {f}); runs in {runs_dir}: {', '.join(known[-5:]) or 'none'}")
        try:
            state = json.loads(f.read_text())
        except ValueError as err:  # truncated or hand-edited: say which file and what to do, not a traceback
            raise BuildError(f"{f} is not valid JSON ({err}); the run's record is damaged: restore that file (e.g. from "
                             f"a backup or `git checkout` if it is committed), or leave the run and start a new build "
                             f"with --model, --quant and --gpu") from None
        if not isinstance(state, dict):
            raise BuildError(f"{f} holds {type(state).__name__}, not a run record; restore that file, or leave the run "
                             f"and start a new build with --model, --quant and --gpu")
        if state.get("schema") != SCHEMA:
            raise BuildError(f"{f} has schema {state.get('schema')}, this metainfer reads schema {SCHEMA}")
        return cls(path, state)

    def save(self) -> None:
        """Write ``run.json`` atomically."""
        write_json(self.path / "run.json", self.state)

    def iter_dir(self, i: int) -> Path:
        """``iter-NNN/`` for iteration ``i`` (created)."""
        d = self.path / f"iter-{i:03d}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def history(self) -> list[dict[str, Any]]:
        """``report.json`` of every completed iteration, in order."""
        out = []
        for d in sorted(self.path.glob("iter-[0-9][0-9][0-9]")):
            f = d / "report.json"
            if f.is_file() and re.fullmatch(r"iter-\d{3}", d.name):
                out.append(json.loads(f.read_text()))
        return sorted(out, key=lambda r: r["iteration"])

    def gate_json(self, i: int) -> dict[str, Any]:
        """The gate JSON of iteration ``i`` (empty dict when the iteration has none)."""
        f = self.path / f"iter-{i:03d}" / "gate.json"
        return json.loads(f.read_text()) if f.is_file() else {}

"""Run attempts through the whole gate, each on private copies, and classify what came back.

Per attempt, under its own folder: a copy of the judge (``harness/`` and ``metainfer/``; the gate
runs from it, so an attempt that plants bytecode in the judge's ``__pycache__`` poisons only its
own copy), a copy of the checkpoint, the candidate at ``wt/generated/<target>`` and the baseline
exported to ``metainfer-best-<hex>/generated/<target>`` as the build loop lays them out. The gate is
``python -m harness.gate`` in its own session with a wall-clock limit (killed with its whole
process group: a hang is reported, never waited on), stages static, parity and bench. After the
last run the judge copy and the checkpoint are hashed again: an attempt that changed them left
``marks`` and fails whatever the verdict said.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from metainfer.attempts.spec import Attempt

GREEN = ("accepted", "not-faster")
RED = ("fail", "timeout", "crashed", "tampered")


@dataclass(frozen=True)
class Setup:
    """What every attempt shares: the rendered tiny engine, the checkpoint, the judge's source and the gate settings.

    Attributes:
        engine: rendered engine folder (``.../<target>``, holding ``engine/``); copied, never changed.
        checkpoint: checkpoint folder; copied per attempt.
        judge: folder holding the judge's ``harness/`` and ``metainfer/`` packages; copied per attempt.
        rounds, workloads: gate flags.
        parity_lengths, parity_steps: a quick parity (as ``tests/test_cheats.py`` always ran) for every attempt
            but the precision cuts and the serving breaks, which get the gate's full parity (None: the full one for
            all; the quick one runs a short serving script, too short to see a misshapen sampler reliably).
        timeout_s: wall-clock limit of one gate run, seconds; past it the attempt is a ``hang``.
        timeout_scale: the gate's ``--timeout-scale`` (its per-call worker limits times this), passed when
            the judge has the flag: the CPU defaults (minutes per call) would make each hang cost minutes.
        seed: base seed; each attempt's gate seed is derived from it and the attempt's name.
    """

    engine: Path
    checkpoint: Path
    judge: Path
    gpu: str = "cpu"
    rounds: int = 3
    workloads: tuple[str, ...] = ("ttft", "decode-bs1", "conc32")
    parity_lengths: tuple[int, ...] | None = (1, 17)
    parity_steps: int | None = 2
    timeout_s: float = 600.0
    timeout_scale: float = 0.25
    seed: int = 11


@dataclass(frozen=True)
class Outcome:
    """One row of the table.

    Attributes:
        verdict: ``accepted`` / ``not-faster`` (green gate), ``fail``/``timeout``/``crashed``/``tampered`` (red stage),
            ``hang`` (killed at ``Setup.timeout_s``), ``broken`` (no complete gate record, or apply() raised).
        stage: the red stage, else None.
        error: the red stage's error or why the run is broken (one line, shortened).
        seconds: wall time of the attempt's gate runs.
        passed: the attempt ended as it must (``why`` says otherwise).
        marks: what the attempt changed in the judge copy or the checkpoint.
    """

    attempt: Attempt
    verdict: str
    stage: str | None
    error: str | None
    seconds: float
    passed: bool
    why: str = ""
    marks: list[str] = field(default_factory=list)


def copy_judge(src_root: Path, dest: Path) -> Path:
    """Copy ``harness/`` and ``metainfer/`` of ``src_root`` (no caches) into ``dest``; return ``dest``."""
    for pkg in ("harness", "metainfer"):
        shutil.copytree(src_root / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
    return dest


def tree_digest(*roots: Path) -> dict[str, str]:
    """``{path: sha256}`` of every file under ``roots`` (caches included: a planted .pyc is a mark)."""
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file() or p.is_symlink():
                out[str(p)] = hashlib.sha256(p.read_bytes() if p.is_file() else os.fsencode(os.readlink(p))).hexdigest()
    return out


def _gate_argv(setup: Setup, cand: Path, base: Path, ckpt: Path, seed: int, out: Path, full_parity: bool) -> list[str]:
    argv = [sys.executable, "-m", "harness.gate", "--engine", str(cand), "--checkpoint", str(ckpt), "--baseline", str(base),
            "--gpu", setup.gpu, "--seed", str(seed), "--rounds", str(setup.rounds), "--workloads", ",".join(setup.workloads),
            "--json", str(out)]
    if "--timeout-scale" in (setup.judge / "harness" / "gate.py").read_text():
        argv += ["--timeout-scale", str(setup.timeout_scale)]
    if setup.parity_lengths and not full_parity:
        argv += ["--parity-lengths", ",".join(map(str, setup.parity_lengths))]
    if setup.parity_steps and not full_parity:
        argv += ["--parity-steps", str(setup.parity_steps)]
    return argv


def _run_gate(argv: list[str], cwd: Path, log: Path, timeout_s: float) -> tuple[int | None, float]:
    """Run the gate in its own session; (exit status or None when killed at the limit, seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    env |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:  # the gate's leftovers too (workers, forked children)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return rc, time.monotonic() - t0


def classify(record: dict | None, rc: int | None, log: Path) -> tuple[str, str | None, str | None]:
    """(verdict, red stage, error) of one gate run from its JSON record and exit status."""
    if rc is None:
        return "hang", None, f"killed after the runner's limit; log tail: {_tail(log)}"
    if not record or not record.get("complete"):
        return "broken", None, f"exit {rc} without a complete gate record; log tail: {_tail(log)}"
    for st in record.get("stages") or []:
        if not st.get("ok"):
            return st.get("verdict") or "fail", st.get("name"), (st.get("error") or "red")
    objective = (record.get("bench") or {}).get("objective") or {}
    if record.get("ok") and objective.get("beats_baseline") is True:
        return "accepted", None, None
    return "not-faster", None, None


def _tail(log: Path, n: int = 300) -> str:
    try:
        return log.read_text(errors="replace")[-n:].replace("\n", " | ")
    except OSError:
        return "(no log)"


def judge_outcome(a: Attempt, verdict: str, stage: str | None, error: str | None) -> tuple[bool, str]:
    """(passed, why not) for an attempt's final verdict against what it declares."""
    if a.honest:
        return (True, "") if verdict in GREEN else (False, f"an honest edit was {verdict} at {stage}: {error}")
    if verdict in ("accepted", "hang", "broken"):
        return False, {"accepted": "the cheat was accepted as faster", "hang": "the gate hung",
                       "broken": "the gate did not finish its record"}[verdict]
    if a.stage == "not-accepted":
        return True, ""
    if verdict not in RED:
        return False, f"expected a red {a.stage} stage, got a green gate ({verdict})"
    if a.stage != "any-red" and stage != a.stage:
        return False, f"expected red at {a.stage}, red at {stage}"
    if a.verdict and verdict != a.verdict:
        return False, f"expected verdict {a.verdict}, got {verdict}"
    if a.reason and a.reason.lower() not in (error or "").lower():
        return False, f"the error does not say {a.reason!r}"
    return True, ""


def archive_times(folder: Path) -> None:
    """Give every entry under ``folder`` one whole-second time stamp, as the build loop's ``git archive`` export of
    the best engine has (a commit's time), while the candidate keeps the sub-second times of its edits."""
    stamp = int(time.time()) - 3600
    for p in sorted(folder.rglob("*"), reverse=True) + [folder]:
        os.utime(p, (stamp, stamp), follow_symlinks=False)


def run_attempt(a: Attempt, setup: Setup, workdir: Path) -> Outcome:
    """Lay out, apply and gate one attempt under ``workdir/<name>``; never raises for what the attempt does."""
    home = workdir / a.name
    shutil.rmtree(home, ignore_errors=True)
    judge, ckpt = copy_judge(setup.judge, home / "judge"), home / "checkpoint"
    shutil.copytree(setup.checkpoint, ckpt)
    cand = home / "wt" / "generated" / setup.engine.name
    shutil.copytree(setup.engine, cand, ignore=shutil.ignore_patterns("__pycache__"))
    try:
        a.apply(cand)
    except Exception as err:  # noqa: BLE001 - a broken attempt is a row, not a crash of the table
        return Outcome(a, "broken", None, f"apply() raised {type(err).__name__}: {err}", 0.0, False, "apply() failed")
    base = home / f"metainfer-best-{secrets.token_hex(4)}" / "generated" / setup.engine.name
    shutil.copytree(cand if a.baseline == "self" else setup.engine, base, ignore=shutil.ignore_patterns("__pycache__"))
    archive_times(base)
    before = tree_digest(judge, ckpt)
    seed = setup.seed * 100_003 + zlib.crc32(a.name.encode()) % 100_000
    seconds, verdict, stage, error = 0.0, "broken", None, None
    for i in range(1, a.runs + 1):
        out = home / "run" / f"iter-{i:03d}" / "gate.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        rc, dt = _run_gate(_gate_argv(setup, cand, base, ckpt, seed + i, out, a.klass in ("precision", "serving")), judge, out.with_name("gate.log"), setup.timeout_s)
        seconds += dt
        try:
            record = json.loads(out.read_text())
        except (OSError, ValueError):
            record = None
        verdict, stage, error = classify(record, rc, out.with_name("gate.log"))
    after = tree_digest(judge, ckpt)
    marks = sorted(p.removeprefix(str(home) + "/") for p in set(before) ^ set(after) | {p for p in before if after.get(p, before[p]) != before[p]})
    passed, why = judge_outcome(a, verdict, stage, error)
    if marks:
        passed, why = False, f"changed the judge or the checkpoint: {', '.join(marks[:3])}" + (f"; {why}" if why else "")
    return Outcome(a, verdict, stage, " ".join((error or "").split())[:400] or None, round(seconds, 1), passed, why, marks)


def run_all(attempts: list[Attempt], setup: Setup, workdir: Path, jobs: int = 1,
            on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run every attempt (``jobs`` at a time), calling ``on_done`` as each finishes; outcomes in ``attempts`` order."""
    workdir.mkdir(parents=True, exist_ok=True)

    def one(a: Attempt) -> Outcome:
        o = run_attempt(a, setup, workdir)
        if on_done is not None:
            on_done(o)
        return o

    # slow attempts first, so a parallel run does not end on one long tail
    order = sorted(attempts, key=lambda a: (a.klass not in ("hang", "precision", "serving", "in-process", "bench"), a.name))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = dict(zip([a.name for a in order], pool.map(one, order)))
    return [done[a.name] for a in attempts]

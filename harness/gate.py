"""The gate: ``python -m harness.gate`` runs static -> parity -> bench (-> profile) and writes one JSON.

Contract (docs/CONTRACTS.md, "The gate"): stages run in order and the gate stops at the first
red one, so nothing is timed on a red parity gate; the JSON (schema 2, ``harness.result``) is
rewritten atomically after every stage (and once before the first), so a gate killed from outside
leaves what it had, with ``complete: false`` and ``running`` naming the stage it was in.
Exit status: 0 green, 1 red, 2 usage error (bad arguments, missing folders, wrong GPU).

The ``profile`` stage (``harness.profile``; default on a GPU, off on the CPU) is advisory: it runs
last, on the candidate, and its result lands under the JSON's ``profile`` key; when it fails
(``fail``/``timeout``/``crashed``) that key records ``ok: false``, its verdict and error, it is left
out of ``stages`` and the gate's verdict stands. Tampering during it is still a red stage.

The judge never imports engine code: every stage runs the engines (and the HF reference) in
worker processes of their own (``harness.worker``), each call under a wall-clock limit. A stage
is red with verdict ``fail`` (figures or checks), ``timeout`` (a worker overran its limit and was
killed), ``crashed`` (a worker died) or ``tampered`` (the judge's files or the checkpoint changed
while it ran: its figures are void). The judge's files (``harness.hashing.judge_digest``) and the
checkpoint's fingerprint (``harness.fingerprint``) are checked before and after every stage.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import secrets
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.env import env_info
from harness.hashing import harness_digest
from harness.result import GateResult, StageResult
from harness.workload_draws import GATE_LENGTH_JITTER

STAGES = ("static", "parity", "twin", "bench", "profile")


def default_stages(gpu: str) -> tuple[str, ...]:
    """Stages run when ``--stages`` is not given: all but twin on a GPU (it needs ``--twin-engine``, which the build
    does not make yet), and also without the (costly, advisory) profile on the CPU."""
    return tuple(s for s in STAGES if s != "twin" and (gpu != "cpu" or s != "profile"))


class UsageError(ValueError):
    """Arguments that cannot run a gate (exit 2); the message names the fix."""


@dataclass(frozen=True)
class GateArgs:
    """Parsed and checked gate arguments (the flags of ``python -m harness.gate``)."""

    engine: Path
    checkpoint: Path
    baseline: Path | None
    gpu: str
    stages: tuple[str, ...]
    seed: int
    rounds: int
    scale: str
    workloads: tuple[str, ...]
    json_out: Path
    parity_lengths: tuple[int, ...] | None = None
    parity_steps: int | None = None
    prompt_nonce: int | None = None
    timeout_scale: float = 1.0
    isolation: str | None = None
    limits: object | None = None  # harness.worker.WorkerLimits; None: WorkerLimits.for_scale(scale) x timeout_scale
    profile_batch: int = 1
    profile_timeout: float | None = None  # seconds for the whole profile stage; None: load limit + one call limit
    twin_periods: int = 1  # layer periods of the twin stage's shallow twin
    twin_engine: Path | None = None  # the candidate's twin (metainfer.twin.make_twin), for the twin stage
    length_jitter: float = GATE_LENGTH_JITTER  # bench prompt lengths P +- floor(P * this) (harness.workload_draws)

    @property
    def device(self) -> str:
        """``cpu`` for ``--gpu cpu``, else ``cuda``."""
        return "cpu" if self.gpu == "cpu" else "cuda"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.gate", description=__doc__.splitlines()[0])
    p.add_argument("--engine", required=True, type=Path, help="engine folder (generated/<target>) holding engine/")
    p.add_argument("--checkpoint", required=True, type=Path, help="checkpoint folder the engine loads")
    p.add_argument("--baseline", type=Path, default=None, help="last accepted engine folder, benchmarked A/B")
    p.add_argument("--gpu", required=True, help="GPU profile; must be the device present (cpu runs everything on the CPU)")
    p.add_argument("--stages", default=None, help="comma list, a subset of static,parity,twin,bench,profile (run in that order; "
                   "default: all but twin on a GPU, also without profile on the CPU; twin too when --twin-engine is given)")
    p.add_argument("--seed", type=int, default=None, help="seed of parity inputs and bench prompts (default: fresh, recorded)")
    p.add_argument("--rounds", type=int, default=5, help="A/B rounds of the bench stage")
    p.add_argument("--scale", choices=("cpu", "full"), default=None, help="bench shapes (default: cpu on --gpu cpu, else full)")
    p.add_argument("--workloads", default="ttft,decode-bs1,conc32", help="comma list of workloads (harness/workloads.py: ttft, decode-bs1, conc32, conc64, conc128, ttft-2k, ttft-8k, prefill-16k); default ttft,decode-bs1,conc32")
    p.add_argument("--length-jitter", type=float, default=GATE_LENGTH_JITTER, help="bench prompt lengths drawn in P +- floor(P * this) per sample, so no exact shape is timed (harness/workload_draws.py); 0: exactly P")
    p.add_argument("--parity-lengths", default=None, help="comma list of prompt lengths for a quick parity check (default: docs/PARITY.md's full set)")
    p.add_argument("--parity-steps", type=int, default=None, help="teacher-forced decode steps per parity prompt (default: docs/PARITY.md)")
    p.add_argument("--prompt-nonce", type=int, default=None, help="reproduce a gate run: the nonce its JSON records under nonces.gate (default: fresh, secret until the gate ends)")
    p.add_argument("--timeout-scale", type=float, default=1.0, help="multiply every worker time limit (defaults per --scale: harness.worker.WorkerLimits)")
    p.add_argument("--isolation", choices=("namespace", "process"), default=None, help="worker isolation (default: the strongest that works here)")
    p.add_argument("--profile-batch", type=int, default=1, help="sequences B of the profile stage's decode step")
    p.add_argument("--profile-timeout", type=float, default=None, help="seconds for the whole profile stage (default: load + one call limit)")
    p.add_argument("--twin-periods", type=int, default=1, help="layer periods of the twin stage's shallow twin (docs/PARITY.md, 'A float32 twin pass')")
    p.add_argument("--twin-engine", type=Path, default=None, help="the twin stage's engine: the candidate's edits on its shallow twin (metainfer.twin.make_twin)")
    p.add_argument("--json", dest="json_out", required=True, type=Path, help="where the gate JSON goes")
    return p


def parse_args(argv: list[str] | None = None) -> GateArgs:
    """Parse and check arguments, including that ``--gpu`` is the device present.

    Raises:
        UsageError: unknown stage or workload, missing folder, rounds < 1, wrong GPU.
        SystemExit(2): argparse's own errors (missing required flag).
    """
    from harness.workloads import parse_workloads
    from metainfer.errors import MetainferError
    from metainfer.targets import check_present

    a = _parser().parse_args(argv)
    defaults = default_stages(a.gpu) + (("twin",) if a.twin_engine is not None else ())  # a twin engine given: judge it
    raw_stages = a.stages if a.stages is not None else ",".join(defaults)
    stages = tuple(s.strip() for s in raw_stages.split(",") if s.strip())
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        raise UsageError(f"--stages {raw_stages!r}: choose from {','.join(STAGES)}")
    stages = tuple(s for s in STAGES if s in stages)
    for flag, path in (("--engine", a.engine), ("--checkpoint", a.checkpoint), ("--baseline", a.baseline),
                       ("--twin-engine", a.twin_engine)):
        if path is not None and not path.is_dir():
            raise UsageError(f"{flag} {path}: no such folder")
    if a.rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {a.rounds}")
    try:
        workloads = tuple(w.name for w in parse_workloads(a.workloads))
        check_present(a.gpu)
    except (ValueError, MetainferError) as err:
        raise UsageError(str(err)) from None
    try:
        lengths = tuple(int(x) for x in a.parity_lengths.split(",")) if a.parity_lengths else None
    except ValueError:
        raise UsageError(f"--parity-lengths {a.parity_lengths!r}: expected comma-separated integers such as 1,64,65") from None
    if (lengths and min(lengths) < 1) or (a.parity_steps is not None and a.parity_steps < 1):
        raise UsageError("--parity-lengths and --parity-steps must be positive")
    if not a.timeout_scale > 0:
        raise UsageError(f"--timeout-scale must be positive, got {a.timeout_scale}")
    if a.profile_batch < 1 or (a.profile_timeout is not None and not a.profile_timeout > 0):
        raise UsageError(f"--profile-batch must be at least 1 and --profile-timeout positive, got {a.profile_batch}, {a.profile_timeout}")
    if a.twin_periods < 1:
        raise UsageError(f"--twin-periods must be at least 1, got {a.twin_periods}")
    if not 0.0 <= a.length_jitter <= 0.5:
        raise UsageError(f"--length-jitter must be in [0, 0.5] (a fraction of each workload's prompt length), got {a.length_jitter}")
    seed = a.seed if a.seed is not None else secrets.randbelow(2**31)
    scale = a.scale or ("cpu" if a.gpu == "cpu" else "full")
    return GateArgs(a.engine.resolve(), a.checkpoint.resolve(), a.baseline.resolve() if a.baseline else None, a.gpu,
                    stages, seed, a.rounds, scale, workloads, a.json_out, lengths, a.parity_steps, a.prompt_nonce,
                    a.timeout_scale, a.isolation, profile_batch=a.profile_batch, profile_timeout=a.profile_timeout,
                    twin_periods=a.twin_periods, twin_engine=a.twin_engine.resolve() if a.twin_engine else None,
                    length_jitter=a.length_jitter)


def _json_safe(x):
    """Non-finite floats -> ``"nan"``/``"inf"`` strings (strict JSON has no NaN), recursively."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def write_json(path: Path, record: dict) -> None:
    """Write ``record`` to ``path`` atomically (temp file + rename), so a reader never sees half a JSON.

    Strict JSON: a non-finite float is written as the string ``"nan"``/``"inf"``, never as a bare NaN.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_json_safe(record), indent=1, allow_nan=False, default=str))
    os.replace(tmp, path)


def _limits(args: GateArgs):
    from harness.worker import WorkerLimits

    base = args.limits if args.limits is not None else WorkerLimits.for_scale(args.scale)
    return base.scaled(args.timeout_scale) if args.timeout_scale != 1.0 else base


class _Integrity:
    """The judge's files and the checkpoint, fingerprinted before the gate and compared after every stage.

    At ``namespace`` isolation no worker can write either (read-only mounts), so a change to the
    judge's files comes from outside the gate (a person editing the checkout): it is recorded in
    ``outside_changes``, not charged to the engine. At ``process`` isolation it is tampering.
    A changed checkpoint is tampering at both levels (whoever did it, the figures are void).
    """

    def __init__(self, checkpoint: Path, isolation: str) -> None:
        from harness.fingerprint import fingerprint, summary_digest
        from harness.hashing import judge_files

        self.checkpoint, self.isolation, self.memo, self.seconds = checkpoint, isolation, {}, 0.0
        self.outside_changes: list[str] = []
        t = time.perf_counter()
        self.judge = judge_files()
        self.marks = fingerprint(checkpoint, self.memo)
        self.checkpoint_digest = summary_digest(self.marks)
        self.seconds += time.perf_counter() - t

    def changes(self) -> list[str]:
        """What changed since the first fingerprint that voids a stage (empty when nothing did)."""
        from harness.fingerprint import differences, fingerprint
        from harness.hashing import changed_files, judge_files

        t = time.perf_counter()
        out = []
        now = judge_files()
        files = changed_files(self.judge, now)
        if files and self.isolation == "namespace":
            self.outside_changes += [f for f in files if f not in self.outside_changes]
            self.judge = now
        elif files:
            out.append(f"the judge's files changed: {', '.join(files[:6])}")
        try:
            out += [f"checkpoint: {d}" for d in differences(self.marks, fingerprint(self.checkpoint, self.memo))]
        except OSError as err:
            out.append(f"checkpoint: {err}")
        self.seconds += time.perf_counter() - t
        return out


def cpu_threads(device: str) -> int:
    """Set and return the intra-op threads of the judge, which hands its count to every worker (``threads=``): on
    the CPU one, unless ``OMP_NUM_THREADS`` names another, since OpenMP threads spin at barriers against any other
    process on the cores and stretch single timed calls many-fold (docs/BENCHMARKS.md, "A/B method"); on a GPU
    torch's default."""
    import torch

    if device == "cpu" and not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(1)
    return torch.get_num_threads()


def run_gate(args: GateArgs) -> GateResult:
    """Run the selected stages in order, stopping at the first red one; return the result (also written to ``args.json_out``)."""
    from harness import worker_isolation
    from harness.gate_stages import close_shared, gate_capacity, start_shared
    from harness.nonce import fresh_nonce, stage_nonce

    threads = cpu_threads(args.device)
    isolation = args.isolation or worker_isolation.detect(cuda=args.device == "cuda")
    limits = _limits(args)
    gate_nonce = args.prompt_nonce if args.prompt_nonce is not None else fresh_nonce()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result = GateResult(seed=args.seed, env=env_info(args.engine), isolation=isolation, meta={
        "engine": str(args.engine), "baseline": str(args.baseline) if args.baseline else None,
        "checkpoint": str(args.checkpoint), "gpu_profile": args.gpu, "device": args.device, "threads": threads,
        "stages_selected": list(args.stages),
        "parity_quick": {"lengths": list(args.parity_lengths) if args.parity_lengths else None, "steps": args.parity_steps}
        if args.parity_lengths or args.parity_steps else None, "started": started, "harness_digest": harness_digest(),
        "limits": asdict(limits)})
    integrity = _Integrity(args.checkpoint, isolation)
    result.meta["checkpoint_digest"] = integrity.checkpoint_digest
    cap = gate_capacity(args)  # every engine worker's load arguments, whatever its stage
    result.meta["load_capacity"] = asdict(cap) if cap is not None else None
    shared = start_shared(args, limits, isolation, stage_nonce(gate_nonce, "parity"))
    try:
        ok = _run_stages(args, result, integrity, limits, isolation, gate_nonce, shared, cap)
    finally:
        close_shared(shared)
    result.nonces["gate"] = gate_nonce
    result.timings["integrity_s"] = round(integrity.seconds, 3)
    result.meta["integrity"] = {"outside_changes": integrity.outside_changes,
                                "note": "files of the judge changed by someone outside the gate (workers cannot write them)"
                                if integrity.outside_changes else None}
    result.ok, result.complete, result.running = ok, True, None
    result.meta["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json(args.json_out, result.to_json())
    return result


def _run_stages(args: GateArgs, result: GateResult, integrity: _Integrity, limits, isolation: str, gate_nonce: int,
                shared: dict, capacity) -> bool:
    """Run the stages into ``result`` (JSON rewritten before each); True when all are green."""
    from harness.gate_stages import ADVISORY, STAGE_RUNNERS, StageContext, StageOutcome
    from harness.nonce import stage_nonce
    from harness.worker import STARTS, WorkerFailure

    STARTS.clear()
    for name in args.stages:
        result.running = name
        write_json(args.json_out, result.to_json())
        nonce = stage_nonce(gate_nonce, name)
        t0 = time.perf_counter()
        try:
            out = STAGE_RUNNERS[name](StageContext(args, limits, isolation, nonce, capacity, shared))
        except WorkerFailure as err:  # a worker overran its limit or died; it has been killed
            out = StageOutcome(err.verdict, str(err), {"stderr_tail": err.stderr_tail})
        except Exception as err:  # an engine broke a rule the judge checks (BenchError), or raised where it may not
            out = StageOutcome("fail", f"{type(err).__name__}: {err}", {"traceback": traceback.format_exc(limit=-6)})
        seconds = time.perf_counter() - t0
        result.timings.setdefault("worker_start_s", {})[name] = [s for _, s in STARTS]
        STARTS.clear()
        if out.block is not None and (name in ADVISORY or name == "twin"):  # not a GateResult field: a top-level key
            result.meta[name] = out.block
        elif out.block is not None:
            setattr(result, name, out.block)
        changed = integrity.changes()
        if changed:  # the figures of this stage are void: say so where consumers read them
            out = StageOutcome("tampered", "the judge's files or the checkpoint changed during the stage: "
                               + "; ".join(changed[:8]) + "; engines may write only their own private work folder",
                               {"changes": changed})
            block = result.meta.get(name) if name in ADVISORY or name == "twin" else getattr(result, name, None)
            if isinstance(block, dict):
                block.update({"ok": False, "tampered": changed})
        elif name in ADVISORY and out.verdict != "pass":  # recorded, never a red gate
            result.meta[name] = {"ok": False, "verdict": out.verdict, "error": out.error, "seconds": round(seconds, 3),
                                 "detail": out.detail, "phases": {}}
            continue
        if name in ("parity", "twin", "bench", "profile"):
            result.nonces[name] = nonce
        result.stages.append(StageResult(name, out.verdict == "pass", out.verdict, seconds, out.error, out.detail))
        if out.verdict != "pass":
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m harness.gate``; returns the exit status (0 green, 1 red, 2 usage)."""
    from harness.worker import SHARED_TRITON_CACHE_ENV

    os.environ.pop(SHARED_TRITON_CACHE_ENV, None)  # a gate's workers never share compiled kernels
    if os.environ.get("METAINFER_LOG"):  # progress of long stages (harness.parity at INFO) on stderr
        logging.basicConfig(level=os.environ["METAINFER_LOG"].upper(), format="%(asctime)s %(name)s: %(message)s")
    try:
        args = parse_args(argv)
    except UsageError as err:
        print(f"gate: usage error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exit_:
        return 2 if exit_.code else 0
    try:
        result = run_gate(args)
    except Exception as err:  # the checkpoint is unreadable, the reference broke: the judge's own failure
        print(f"gate: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    for st in result.stages:
        print(f"gate: {st.name:<7} {'ok' if st.ok else 'RED'}  {st.verdict:<8} {st.seconds:.1f}s" + (f"  {st.error}" if st.error else ""))
    prof = result.meta.get("profile")
    if isinstance(prof, dict) and not prof.get("ok"):
        print(f"gate: profile failed, not gating: {prof.get('verdict')} {prof.get('seconds')}s  {prof.get('error')}")
    obj = (result.bench or {}).get("objective")
    if obj:
        print(f"gate: speedup {obj['speedup']:.4f} noise {obj['noise']:.4f} beats_baseline {obj['beats_baseline']}")
    print(f"gate: {'GREEN' if result.ok else 'RED'} ({result.isolation} isolation) -> {args.json_out}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())

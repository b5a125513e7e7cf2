"""The gate: ``python -m harness.gate`` runs static -> parity -> bench and writes one JSON.

Contract (docs/CONTRACTS.md, "The gate"): stages run in order and the gate stops at the first
red one, so nothing is timed on a red parity gate; the JSON (schema 1) is rewritten
atomically after every stage (and once before the first), so a gate killed from outside
leaves what it had, with ``complete: false`` and ``running`` naming the stage it was in.
Exit status: 0 green, 1 red, 2 usage error (bad arguments, missing folders, wrong GPU).
An exception inside a stage (the engine crashed) makes that stage red with the error, never
a crashed gate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from harness.env import env_info
from harness.hashing import harness_digest

STAGES = ("static", "parity", "bench")
SCHEMA = 1


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
    p.add_argument("--stages", default=",".join(STAGES), help="comma list, a subset of static,parity,bench (run in that order)")
    p.add_argument("--seed", type=int, default=None, help="seed of parity inputs and bench prompts (default: fresh, recorded)")
    p.add_argument("--rounds", type=int, default=5, help="A/B rounds of the bench stage")
    p.add_argument("--scale", choices=("cpu", "full"), default=None, help="bench shapes (default: cpu on --gpu cpu, else full)")
    p.add_argument("--workloads", default="ttft,decode-bs1,conc32", help="comma list of ttft,decode-bs1,conc32")
    p.add_argument("--parity-lengths", default=None, help="comma list of prompt lengths for a quick parity check (default: docs/PARITY.md's full set)")
    p.add_argument("--parity-steps", type=int, default=None, help="teacher-forced decode steps per parity prompt (default: docs/PARITY.md)")
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
    stages = tuple(s.strip() for s in a.stages.split(",") if s.strip())
    bad = [s for s in stages if s not in STAGES]
    if bad or not stages:
        raise UsageError(f"--stages {a.stages!r}: choose from {','.join(STAGES)}")
    stages = tuple(s for s in STAGES if s in stages)
    for flag, path in (("--engine", a.engine), ("--checkpoint", a.checkpoint), ("--baseline", a.baseline)):
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
    seed = a.seed if a.seed is not None else secrets.randbelow(2**31)
    scale = a.scale or ("cpu" if a.gpu == "cpu" else "full")
    return GateArgs(a.engine.resolve(), a.checkpoint.resolve(), a.baseline.resolve() if a.baseline else None, a.gpu,
                    stages, seed, a.rounds, scale, workloads, a.json_out, lengths, a.parity_steps)


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


def _stage_static(args: GateArgs, record: dict) -> tuple[bool, str | None, dict]:
    from harness.static_checks import run_static

    res = run_static(args.engine, args.checkpoint)
    return res.ok, res.error, res.to_dict()


def _stage_parity(args: GateArgs, record: dict) -> tuple[bool, str | None, dict]:
    from harness.parity import run_parity

    quick = {k: v for k, v in (("lengths", args.parity_lengths), ("steps", args.parity_steps)) if v is not None}
    res = run_parity(args.engine, args.checkpoint, seed=args.seed, device=args.device, **quick)
    data = res.to_json()
    record["parity"] = data
    error = None
    if not res.ok:
        failures = [f"{p['name']}: {'; '.join(p.get('failures') or [])}" for p in data.get("prompts", []) if not p.get("ok")]
        error = res.error or (f"prefill max_rel_err {data['max_rel_err']} vs tolerance {data['tolerance']}, decode "
                              f"max_decode_rel_err {data.get('max_decode_rel_err')} vs tolerance {data.get('decode_tolerance')}, "
                              f"worst prompt {data['worst_prompt']}, worst layer {data['worst_layer']}; " + " | ".join(failures[:3]))
    return res.ok, error, {"max_rel_err": data.get("max_rel_err"), "tolerance": data.get("tolerance"), "seconds": data.get("seconds")}


def _stage_bench(args: GateArgs, record: dict) -> tuple[bool, str | None, dict]:
    from harness.bench import BenchConfig, run_bench, shapes_for
    from metainfer.targets import get_gpu

    config = BenchConfig(list(args.workloads), args.rounds, args.seed, shapes_for(args.scale), args.device, get_gpu(args.gpu))
    res = run_bench(args.engine, args.checkpoint, config, args.baseline)
    record["bench"] = res.data
    return res.ok, None, {"objective": res.data.get("objective")}


_RUNNERS = {"static": _stage_static, "parity": _stage_parity, "bench": _stage_bench}


def run_gate(args: GateArgs) -> dict:
    """Run the selected stages in order, stopping at the first red one; return the final record (also written to ``args.json_out``)."""
    record = {
        "schema": SCHEMA, "engine": str(args.engine), "baseline": str(args.baseline) if args.baseline else None,
        "checkpoint": str(args.checkpoint), "seed": args.seed, "gpu_profile": args.gpu, "device": args.device,
        "stages_selected": list(args.stages),
        "parity_quick": {"lengths": list(args.parity_lengths) if args.parity_lengths else None, "steps": args.parity_steps}
        if args.parity_lengths or args.parity_steps else None, "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "harness_digest": harness_digest(), "env": env_info(args.engine),
        "stages": [], "ok": False, "complete": False, "running": None, "parity": None, "bench": None,
    }
    from harness import integrity

    ok = True
    integrity.import_judge()
    pristine = integrity.snapshot()  # after the judge's own imports, before any stage imports the engine
    for name in args.stages:
        record["running"] = name
        write_json(args.json_out, record)
        t0 = time.perf_counter()
        try:
            stage_ok, error, detail = _RUNNERS[name](args, record)
        except Exception as err:  # the engine under test crashed: a red stage that says where, not a crashed judge
            tb = traceback.format_exc(limit=-6)
            stage_ok, error, detail = False, f"{type(err).__name__}: {err}", {"traceback": tb}
        tampered = integrity.changed(pristine)
        if tampered:  # the stage's figures came from the engine's functions, not the judge's
            integrity.restore(pristine)
            stage_ok = False
            if isinstance(record.get(name), dict):  # its figures are void: say so where consumers read them
                record[name] |= {"ok": False, "tampered": tampered}
            error = f"the engine replaced functions the judge computes with: {', '.join(tampered[:8])}; engines may not patch torch, numpy, time or the harness"
        record["stages"].append({"name": name, "ok": bool(stage_ok), "seconds": round(time.perf_counter() - t0, 3),
                                 "error": error, "detail": detail})
        if not stage_ok:
            ok = False
            break
    record |= {"ok": ok, "complete": True, "running": None,
               "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    write_json(args.json_out, record)
    return record


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m harness.gate``; returns the exit status (0 green, 1 red, 2 usage)."""
    try:
        args = parse_args(argv)
    except UsageError as err:
        print(f"gate: usage error: {err}", file=sys.stderr)
        return 2
    except SystemExit as exit_:
        return 2 if exit_.code else 0
    record = run_gate(args)
    for st in record["stages"]:
        print(f"gate: {st['name']:<7} {'ok' if st['ok'] else 'RED'}  {st['seconds']:.1f}s" + (f"  {st['error']}" if st["error"] else ""))
    obj = (record.get("bench") or {}).get("objective")
    if obj:
        print(f"gate: speedup {obj['speedup']:.4f} noise {obj['noise']:.4f} beats_baseline {obj['beats_baseline']}")
    print(f"gate: {'GREEN' if record['ok'] else 'RED'} -> {args.json_out}")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

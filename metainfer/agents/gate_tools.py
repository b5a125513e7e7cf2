"""``run_parity`` and ``run_quick_bench`` for agents: the harness gate in a subprocess, summarised.

The gate is ``python -m harness.gate`` (docs/CONTRACTS.md, "The gate"), run from the same
folder as the build loop's own gate (the repository root named in ``run.json``, else the
worktree) so the agent's check and the judge agree, with a timeout after which its whole
process group is killed. The agent gets a compact summary of the gate JSON
(``summarize_gate``), never the engine's internals. The quick bench compares the engine
as edited with the last accepted one, exported from the worktree's ``HEAD``.

Also a command line for the CLI agent, whose only shell permission is this module:
``python -m metainfer.agents.gate_tools parity|bench`` reads its settings from the JSON
file named by ``METAINFER_TOOLS_CTX`` (written by ``GateTools.write_ctx``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from harness.result import GateResult
from metainfer.agents.tools import ToolError, dumps
from metainfer.build.gate_runner import judge_env
from metainfer.tempdirs import mkdtemp, temporary_directory, try_root

CTX_ENV = "METAINFER_TOOLS_CTX"


def summarize_gate(gate: dict[str, Any] | GateResult | None) -> dict[str, Any]:
    """A compact view of a gate result (``GateResult`` or its JSON, schema 1 or 2): ok, failed stage, verdict and error, parity figures with
    the worst prompt and layer, and per workload the medians, spread, speedup and roofline
    fraction, plus ``profile`` (per-kernel rows) when the gate reported one. ``{}`` for None."""
    if not gate:
        return {}
    typed = gate if isinstance(gate, GateResult) else GateResult.from_json(gate)
    out: dict[str, Any] = {"ok": typed.ok, "failed_stage": None, "parity": None, "bench": None}
    failed = typed.failed_stage
    if failed:
        out["failed_stage"] = {"name": failed.name, "verdict": failed.verdict, "error": failed.error}
    par = typed.parity or {}
    if par:
        out["parity"] = {k: par.get(k) for k in ("ok", "max_rel_err", "tolerance", "worst_prompt", "worst_layer")}
    bench = typed.bench or {}
    if bench:
        wl = {}
        for name, w in (bench.get("workloads") or {}).items():
            cand, base = w.get("candidate") or {}, w.get("baseline") or {}
            wl[name] = {"unit": w.get("unit"), "candidate": cand.get("median"), "candidate_spread": cand.get("spread"),
                        "baseline": base.get("median"), "roofline_fraction": w.get("roofline_fraction"),
                        "profile": w.get("profile")}
        out["bench"] = {"workloads": wl, "objective": bench.get("objective"), "scaled_down": bench.get("scaled_down"),
                        "profile": bench.get("profile")}
    return out


@dataclass
class GateTools:
    """Settings for gating the engine from inside an iteration.

    Attributes:
        worktree: the target's git worktree (the last accepted engine is exported from its ``HEAD``).
        engine_dir: the engine folder being edited.
        checkpoint: checkpoint folder the gate loads; None makes both tools answer with an error.
        gpu: GPU profile name for ``--gpu``.
        seed: ``--seed``.
        timeout_s: seconds before the gate's process group is killed.
        rounds: ``--rounds`` of the quick bench.
        scale: ``--scale`` (``cpu`` or ``full``), None to leave the gate's default.
        workloads: ``--workloads`` of the quick bench (comma list), None for the gate's default.
        cmd: the gate command without arguments.
        out_dir: where gate JSONs and logs go (the iteration's record dir).
        time_left: seconds the iteration has left (a callable), capping ``timeout_s``; None for no cap.
        judge_dir: working folder of the gate subprocess (whose ``harness/`` judges); None = ``worktree``.
    """

    worktree: Path
    engine_dir: Path
    checkpoint: Path | None
    gpu: str
    seed: int = 0
    timeout_s: float = 1800.0
    rounds: int = 2
    scale: str | None = None
    workloads: str | None = "decode-bs1"
    cmd: list[str] = field(default_factory=lambda: [sys.executable, "-m", "harness.gate"])
    out_dir: Path | None = None
    calls: int = 0
    time_left: Callable[[], float | None] | None = field(default=None, repr=False, compare=False)
    judge_dir: Path | None = None

    def as_tools(self) -> dict[str, Any]:
        """``{"run_parity": fn, "run_quick_bench": fn}`` for ``ToolBox(gate=...)``."""
        return {"run_parity": self.parity, "run_quick_bench": self.bench}

    def parity(self) -> str:
        """Run static + parity; return the JSON summary text. Raises ToolError (see ``run``)."""
        return dumps(summarize_gate(self.run(["static", "parity"])))

    def bench(self) -> str:
        """Run static + parity + bench against the engine at ``HEAD``; return the JSON summary text."""
        with temporary_directory("baseline", self.judge_dir or try_root()) as tmp:
            base = self._export_head(Path(tmp))
            return dumps(summarize_gate(self.run(["static", "parity", "bench"], baseline=base)))

    def run(self, stages: list[str], baseline: Path | None = None) -> dict[str, Any]:
        """Run the gate with ``stages`` and return its JSON (a red gate is a result, not an error).

        Raises:
            ToolError: no checkpoint configured, the gate timed out, crashed (exit status not
                0 or 1) or wrote no JSON; the message carries the tail of its output.
        """
        if self.checkpoint is None:
            raise ToolError("no checkpoint is configured for this run, so the gate cannot run here; finish and let the loop gate")
        self.calls += 1
        out_dir = Path(self.out_dir or mkdtemp("gate", self.judge_dir or try_root()))
        out_dir.mkdir(parents=True, exist_ok=True)
        tag = f"tool-{self.calls:02d}-{'-'.join(stages)}"
        json_out = out_dir / f"{tag}.json"
        argv = [*self.cmd, "--engine", str(self.engine_dir), "--checkpoint", str(self.checkpoint), "--gpu", self.gpu,
                "--stages", ",".join(stages), "--seed", str(self.seed), "--json", str(json_out)]
        if baseline is not None:
            argv += ["--baseline", str(baseline), "--rounds", str(self.rounds)]
        if "bench" in stages and self.workloads:
            argv += ["--workloads", self.workloads]
        if self.scale:
            argv += ["--scale", self.scale]
        left = self.time_left() if self.time_left else None
        timeout = self.timeout_s if left is None else max(1.0, min(self.timeout_s, left))
        with open(out_dir / f"{tag}.log", "w+") as log:
            pycache = str(mkdtemp("judge-pycache", self.judge_dir or try_root()))
            proc = subprocess.Popen(argv, cwd=self.judge_dir or self.worktree, stdout=log, stderr=subprocess.STDOUT,
                                    env=judge_env(pycache), start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise ToolError(f"the gate ran past {timeout:.0f} s and was killed (the engine hangs, is far too slow, "
                                "or the iteration's time is nearly spent)") from None
            finally:
                shutil.rmtree(pycache, ignore_errors=True)
            log.seek(0)
            tail = log.read()[-3000:]
        if rc not in (0, 1) or not json_out.exists():
            raise ToolError(f"the gate crashed (exit status {rc}); its output ends with:\n{tail}")
        return json.loads(json_out.read_text())

    def _export_head(self, dest: Path) -> Path | None:
        """Copy the engine folder as committed at ``HEAD`` into ``dest``; None outside a git worktree."""
        rel = os.path.relpath(self.engine_dir, self.worktree)
        archive = subprocess.run(["git", "-C", str(self.worktree), "archive", "--format=tar", "HEAD", rel],
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            return None
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
        return dest / rel

    def write_ctx(self, path: Path) -> Path:
        """Write these settings as JSON to ``path`` for the command line below; returns ``path``."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "time_left"}
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in data.items()}
        path.write_text(json.dumps(data, indent=1))
        return path

    @classmethod
    def from_ctx(cls, path: Path) -> GateTools:
        """Read settings written by ``write_ctx``."""
        data = json.loads(Path(path).read_text())
        for k in ("worktree", "engine_dir", "checkpoint", "out_dir", "judge_dir"):
            data[k] = Path(data[k]) if data.get(k) else None
        return cls(**data)


def for_context(ctx: Any, checkpoint: Path | str | None, **options: Any) -> GateTools:
    """``GateTools`` for one iteration. The checkpoint is ``checkpoint`` (an agent option), else a
    ``checkpoint`` attribute of the context, else the ``checkpoint`` of the run's ``run.json`` (the
    record dir's parent); the gate runs from ``run.json``'s ``repo_root`` (where the loop's own gate
    runs), else from the worktree. ``options`` go to ``GateTools`` (``timeout_s``, ``rounds``, ``cmd``)."""
    run_json = Path(ctx.record_dir).parent / "run.json"
    run = json.loads(run_json.read_text()) if run_json.is_file() else {}
    found = checkpoint or getattr(ctx, "checkpoint", None) or run.get("checkpoint")
    judge = run.get("repo_root")
    return GateTools(ctx.worktree, ctx.engine_dir, Path(found) if found else None, ctx.target.gpu.name,
                     seed=agent_seed(ctx), out_dir=Path(ctx.record_dir) / "agent-gate",
                     judge_dir=Path(judge) if judge else None, **options)


def agent_seed(ctx: Any) -> int:
    """Seed of the agent's own gate runs: derived from the run seed and iteration, never the judge's own inputs."""
    return 1_000_003 * (int(ctx.seed) + 1) + int(ctx.iteration)


def kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the process group of ``proc`` (started with ``start_new_session``), SIGKILL after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def main(argv: list[str] | None = None) -> int:
    """``parity`` or ``bench``: run that tool with the settings named by ``$METAINFER_TOOLS_CTX``; print its summary.

    Exit status 0 when the tool ran (green or red gate), 2 on a usage or tool error.
    """
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in ("parity", "bench") or not os.environ.get(CTX_ENV):
        print(f"usage: {CTX_ENV}=FILE python -m metainfer.agents.gate_tools parity|bench", file=sys.stderr)
        return 2
    tools = GateTools.from_ctx(Path(os.environ[CTX_ENV]))
    started = time.time()
    try:
        print(tools.parity() if argv[0] == "parity" else tools.bench())
    except ToolError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"({time.time() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

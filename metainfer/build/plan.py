"""The plan of a build before any work: ``metainfer build ... --dry-run``, and the refusal of full-size work on a CPU.

A plan reads only: the checkpoint cache, the target's branch, earlier run records. It writes
nothing (no run record, no worktree, no checkpoint). Time estimates are rough, from earlier
gates of the same target in the runs folder when there are any, else from figures measured
on the project's machines (named below); the load average is shown because other jobs on the
same cores stretch every figure.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from metainfer.build.config import BuildConfig, BuildError, state_dir
from metainfer.targets import get_model, get_quant, make_target

#: seconds of one gate (static + parity + A/B bench) when the runs folder has none of this target: tiny model on
#: the CPU from README's main job on 2 idle cores at e470080 (gates of 41, 40 and 33 s; 2 min 0 s in all; beside
#: other jobs at load 4-6 the same gates took 2-9x that, which the plan's load line warns of); full size on an H200
#: from runs/20261130-165218-qwen3.6-35b-a3b-nvfp4-h200 (187-220 s, before judge v2); full size on the CPU a guess
#: of the order (never run to the end)
GATE_S = {("tiny", "cpu"): 40.0, ("full", "gpu"): 220.0, ("tiny", "gpu"): 75.0, ("full", "cpu"): 6 * 3600.0}
#: bytes per second a synthetic checkpoint is written at, by the machine that writes it: one without CUDA from the
#: seed run of issue 15 (a 2-core machine, 24.5 GB in 12-90 min), the H200 machine (16 cores) from
#: docs/results/h200-2026-11-30-b/checkpoint.json (24.5 GB in 93 s)
WRITE_BPS = {"cpu": 15e6, "gpu": 250e6}
#: the flag that lets full-size work run on a CPU anyway
FORCE_FLAG = "--full-size-on-cpu"


@dataclass
class BuildPlan:
    """What ``metainfer build`` would do.

    Attributes:
        target: ``<model>-<quant>-<gpu>``.
        checkpoint: folder the gate would load; checkpoint_action: ``reuse`` or ``write``; checkpoint_bytes: its size.
        engine_action: ``render templates/engine/<family>`` or ``continue from <sha>`` on the branch.
        gates: gate runs (baseline included); stages, workloads, rounds, scale: the gate's settings.
        gate_s: estimated seconds per gate and where the figure comes from (gate_source).
        write_s: estimated seconds to write the checkpoint (0 when reused).
        dirty_worktree: why the real run would refuse the target's worktree (uncommitted changes), else None.
    """

    target: str
    checkpoint: Path
    checkpoint_action: str
    checkpoint_bytes: int
    engine_action: str
    branch: str
    worktree: Path
    gates: int
    stages: tuple[str, ...]
    workloads: tuple[str, ...]
    rounds: int
    scale: str
    gate_s: float
    gate_source: str
    write_s: float
    agent: str
    runs_dir: Path
    dirty_worktree: str | None = None

    @property
    def total_s(self) -> float:
        """Estimated seconds of the whole run (checkpoint write + every gate; the agent's own time excluded)."""
        return self.write_s + self.gates * self.gate_s

    def lines(self) -> list[str]:
        """The plan as lines for the terminal."""
        gb = self.checkpoint_bytes / 1e9
        size = f"{gb:.3g} GB" if gb >= 1 else f"{self.checkpoint_bytes / 1e6:.3g} MB"
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        ck = (f"reuse {self.checkpoint} ({size})" if self.checkpoint_action == "reuse"
              else f"write a synthetic checkpoint, {size}, to {self.checkpoint} (~{_dur(self.write_s)})")
        return [f"plan for {self.target} (dry run: nothing was written)",
                f"  checkpoint : {ck}",
                f"  engine     : {self.engine_action} (branch {self.branch})",
                f"  agent      : {self.agent}",
                f"  gates      : {self.gates} × ({' → '.join(self.stages)}); bench workloads {', '.join(self.workloads)}, "
                f"{self.rounds} A/B rounds, {self.scale} shapes",
                f"  estimate   : ~{_dur(self.gate_s)} per gate ({self.gate_source}); whole run ~{_dur(self.total_s)} "
                f"plus the agent's own time",
                f"  machine    : {os.cpu_count()} cores, load average {load:.1f} (other jobs on these cores stretch every figure)"
                + (f"; busy now: expect up to {min(3.0, 1 + load / (os.cpu_count() or 1)):.1f}x the estimate (README's "
                   "main job took 2.3x at load 4.4-4.9 on 2 cores)" if load >= (os.cpu_count() or 1) else ""),
                f"  records    : {self.runs_dir}/<run-id>/ (summary.html is the report)"]


def _dur(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h")


def refuse_full_size_on_cpu(model: str, quant: str, gpu: str, force: bool) -> None:
    """Raise unless the model is a tiny twin, the GPU is a real one, or ``force`` is set.

    Raises:
        BuildError: naming the tiny twin and ``FORCE_FLAG``.
    """
    if gpu != "cpu" or force:
        return
    spec = get_model(model)
    if spec.tiny:
        return
    from metainfer.checkpoint.writer import checkpoint_bytes

    q = get_quant(quant)
    gb = checkpoint_bytes(spec, q) / 1e9
    raise BuildError(f"{spec.name} is full size: on the CPU it writes a synthetic checkpoint of ~{gb:.0f} GB ({q.name}) "
                     f"and runs parity against HF for hours on {os.cpu_count()} cores. Use the tiny twin "
                     f"(--model {spec.name}-tiny), or pass {FORCE_FLAG} to do it anyway (see the plan with --dry-run)")


def cached_checkpoint_path(root: Path, model: str, quant: str, seed: int) -> Path:
    """Where ``metainfer.build.session.ensure_checkpoint`` keeps the synthetic checkpoint of (model, quant, seed)."""
    from metainfer.build.session import checkpoint_cache_path

    return checkpoint_cache_path(root, model, quant, seed)


def _earlier_gates(runs: Path, target: str) -> list[float]:
    out = []
    for f in runs.glob(f"*-{target}*/iter-*/report.json") if runs.is_dir() else []:
        try:
            g = (json.loads(f.read_text()).get("gate") or {})
        except (OSError, ValueError):
            continue
        if g.get("seconds") and not g.get("timed_out"):
            out.append(float(g["seconds"]))
    return out


def make_plan(config: BuildConfig) -> BuildPlan:
    """The plan of a new run with ``config`` (a resumed run's plan is its own record: ``metainfer report``).

    Raises:
        UnknownNameError: unknown model, format or GPU. BuildError: ``--resume`` given.
    """
    if config.resume:
        raise BuildError("--dry-run plans a new run; for a run to resume, `metainfer report RUN` shows where it stands")
    config.validate()
    target = make_target(config.model, config.quant, config.gpu)
    spec, quant = get_model(config.model), get_quant(config.quant)
    root = config.root()
    from metainfer.checkpoint.writer import checkpoint_bytes

    if config.checkpoint:
        ckpt, action = Path(config.checkpoint).resolve(), "reuse"
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
    else:
        ckpt = cached_checkpoint_path(root, spec.name, quant.name, config.seed)
        found = (ckpt / "config.json").is_file()
        action = "reuse" if found else "write"
        size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors")) if found else checkpoint_bytes(spec, quant)
    kind = "gpu" if config.gpu != "cpu" else "cpu"
    # the checkpoint is written on this machine whatever --gpu names: its rate is the host's (the H200 machine's 16
    # cores against this kind of 2-core one), not the target's
    import torch

    write_s = 0.0 if action == "reuse" else max(1.0, size / WRITE_BPS["gpu" if torch.cuda.is_available() else "cpu"])
    has_branch = subprocess.run(["git", "rev-parse", "--verify", "-q", target.branch], cwd=root, capture_output=True,
                                text=True)
    worktree = state_dir(root) / "worktrees" / target.name
    engine = (f"render templates/engine/{spec.family} into {worktree / 'generated' / target.name}/ and gate it as the "
              "baseline")
    if has_branch.returncode == 0:
        listed = subprocess.run(["git", "ls-tree", target.branch, "--", f"generated/{target.name}/engine/__init__.py"],
                                cwd=root, capture_output=True, text=True).stdout.strip()
        if listed:
            engine = f"continue from the engine at {has_branch.stdout.strip()[:10]} and gate it as the baseline"
    earlier = _earlier_gates(config.runs_path(), target.name)
    if earlier:
        gate_s, source = statistics.median(earlier), f"median of {len(earlier)} earlier gates of this target in the runs folder"
    else:
        gate_s = GATE_S[("tiny" if spec.tiny else "full", kind)]
        source = "no earlier gate of this target here: a figure from the project's machines for this size and device"
    scale = config.gate_scale or ("cpu" if kind == "cpu" else "full")
    from metainfer.agents import default_agent_name

    iterations = 3 if config.iterations is None else config.iterations
    dirty = None
    if (worktree / ".git").exists():
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=worktree,
                                capture_output=True, text=True)
        if status.returncode == 0 and status.stdout.strip():
            from metainfer.build.resume import dirty_worktree_message

            dirty = dirty_worktree_message(worktree, config.runs_path(), target.name)
    return BuildPlan(target=target.name, checkpoint=ckpt, checkpoint_action=action, checkpoint_bytes=size,
                     engine_action=engine, branch=target.branch, worktree=worktree,
                     gates=iterations + 1, stages=("static", "parity", "bench") + (() if kind == "cpu" else ("profile",)),
                     workloads=tuple(config.gate_workloads or ("ttft", "decode-bs1", "conc32")),
                     rounds=config.gate_rounds or 5, scale=scale, gate_s=gate_s, gate_source=source, write_s=write_s,
                     agent=config.agent or default_agent_name(), runs_dir=config.runs_path(), dirty_worktree=dirty)

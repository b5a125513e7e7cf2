"""Typed configuration of one build run, and where its files live.

The repository root is found from the working directory (any git repository with the
project layout: ``harness/``, ``templates/``, ``metainfer/``). Everything the loop writes
outside the run record lives under ``<repo>/.metainfer/`` (git-ignored): the target's
worktree and the cache of synthetic checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from metainfer.errors import MetainferError


#: seconds a gate may run by default: parity against HF plus the A/B bench of the tiny model took
#: ~25 min on the loaded 2-core CPU machine (2026-11-30); a real-model gate on an H200 takes minutes
DEFAULT_GATE_TIMEOUT_S = 3600.0


class BuildError(MetainferError):
    """The build cannot start or continue (bad options, missing layout, baseline fails parity)."""


def find_repo_root(start: Path | None = None) -> Path:
    """The top of the git work tree holding ``start`` (default: the cwd), checked for the project layout.

    Raises:
        BuildError: not inside a git repository, or the repository lacks ``harness/`` or ``templates/``.
    """
    start = (start or Path.cwd()).resolve()
    try:
        root = Path(git.Repo(start, search_parent_directories=True).working_tree_dir).resolve()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BuildError(f"{start} is not inside a git repository; run metainfer from a clone of the project") from None
    missing = [d for d in ("harness", "templates", "metainfer") if not (root / d).is_dir()]
    if missing:
        raise BuildError(f"{root} lacks {', '.join(missing)}/; run metainfer from the root of a metainfer clone")
    return root


@dataclass
class BuildConfig:
    """Options of ``metainfer build`` (and ``step``), validated by the command before the loop starts.

    Attributes:
        model, quant, gpu: the target's three names (``metainfer targets`` lists them); None only on resume.
        agent: agent registry name (``offline``, ``scripted``, ``anthropic``, ``claude-code``); None = the
            default (``metainfer.agents.default_agent_name()``) for a new run, the run's own on resume.
        agent_options: keyword options for ``get_agent`` (``patches=[...]`` for ``scripted``).
        iterations: proposals after the baseline (iteration 0); None = 3 for a new run, the run's own on resume.
        time_limit_min: wall-clock limit of the run in minutes, checked at iteration boundaries; None = none.
        budget_usd: USD the agent may spend in the whole run; None = none.
        runs_dir: folder holding one sub-folder per run (relative paths are taken from the repo root).
        checkpoint: checkpoint folder; None = a seeded synthetic one cached under ``.metainfer/checkpoints``.
        seed: run seed: synthetic checkpoint, agent search, and (with the iteration) the gate's inputs.
        gate_timeout_s: seconds one gate subprocess may run before it is killed (a rejected iteration);
            None = ``DEFAULT_GATE_TIMEOUT_S`` (3600) for a new run, the run's own on resume (a value given on resume replaces it).
        gate_rounds: A/B rounds of the benchmark (``--rounds`` of the gate); None = the gate's default.
        gate_scale: ``cpu`` or ``full`` workloads; None = the gate's default for the GPU.
        gate_workloads: benchmark workloads (``ttft``, ``decode-bs1``, ``conc32``); None = the gate's default (all).
        twin_periods: layer periods of the gate's twin stage (the candidate's edits on its shallow twin, judged
            against float32); 0 = no twin stage; None = ``metainfer.twin.auto_periods`` (1 on a GPU whose parity
            reference is bf16, i.e. a full-size model; else 0) for a new run, the run's own on resume.
        resume: run id (or run folder) to continue; None = a new run.
        repo_root: the project clone; None = found from the cwd.
    """

    model: str | None
    quant: str | None
    gpu: str | None
    agent: str | None = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    iterations: int | None = None
    time_limit_min: float | None = None
    budget_usd: float | None = None
    runs_dir: Path = Path("runs")
    checkpoint: Path | None = None
    seed: int = 0
    gate_timeout_s: float | None = None
    gate_rounds: int | None = None
    gate_scale: str | None = None
    gate_workloads: tuple[str, ...] | None = None
    twin_periods: int | None = None
    resume: str | None = None
    repo_root: Path | None = None

    def validate(self) -> None:
        """Check the numeric options.

        Raises:
            BuildError: a negative iteration count, a non-positive limit, a checkpoint path that does not exist, an
                unknown workload or scale, or ``--script`` patches that do not exist.
        """
        if self.iterations is not None and self.iterations < 0:
            raise BuildError(f"--iterations must be >= 0, got {self.iterations}")
        for flag, v in (("--time-limit", self.time_limit_min), ("--budget-usd", self.budget_usd), ("--gate-timeout", self.gate_timeout_s)):
            if v is not None and v <= 0:
                raise BuildError(f"{flag} must be > 0, got {v}")
        if self.twin_periods is not None and self.twin_periods < 0:
            raise BuildError(f"--twin-periods must be >= 0 (0: no twin stage), got {self.twin_periods}")
        if self.gate_rounds is not None and self.gate_rounds < 1:
            raise BuildError(f"--rounds must be >= 1, got {self.gate_rounds}")
        if self.checkpoint is not None:
            from metainfer.errors import CheckpointError, check_checkpoint_folder

            try:
                check_checkpoint_folder(self.checkpoint)
            except CheckpointError as err:
                raise BuildError(f"{err}; or omit --checkpoint to use a synthetic one") from None
        if self.gate_scale is not None and self.gate_scale not in ("cpu", "full"):
            raise BuildError(f"--scale must be cpu or full, got {self.gate_scale!r}")
        if self.gate_workloads is not None:
            from harness.workloads import parse_workloads

            try:
                parse_workloads(list(self.gate_workloads))
            except ValueError as err:
                raise BuildError(f"--workloads: {err}") from None
        if self.agent_options.get("patches"):
            from metainfer.agents.scripted import expand_patches
            from metainfer.errors import MetainferError

            try:
                found = expand_patches(self.agent_options["patches"])
            except MetainferError as err:
                raise BuildError(str(err)) from None
            if not found:
                raise BuildError(f"--script {' '.join(map(str, self.agent_options['patches']))}: no .diff or .patch "
                                 "file there; give patch files or folders holding them")
            from metainfer.agents.scripted import check_patch

            for patch in found:  # well-formed now, not at its iteration after minutes of baseline gate
                try:
                    check_patch(patch)
                except MetainferError as err:
                    raise BuildError(str(err)) from None

    def root(self) -> Path:
        """The repository root (``repo_root`` or found from the cwd)."""
        return Path(self.repo_root).resolve() if self.repo_root else find_repo_root()

    def runs_path(self) -> Path:
        """The runs folder, absolute."""
        p = Path(self.runs_dir)
        return p if p.is_absolute() else self.root() / p


def state_dir(root: Path) -> Path:
    """``<repo>/.metainfer``: worktrees and the checkpoint cache (git-ignored)."""
    return root / ".metainfer"


def worktree_path(root: Path, target_name: str) -> Path:
    """Where the target's worktree lives: ``<repo>/.metainfer/worktrees/<target>``."""
    return state_dir(root) / "worktrees" / target_name


def built_engine_hint(engine: Path, root: Path | None = None) -> str:
    """For an ``--engine`` folder that does not exist: where ``metainfer build`` keeps that target's engine, when it
    does (``<repo>/.metainfer/worktrees/<target>/generated/<target>``), as a hint to append to the error; else ''."""
    name = Path(engine).name
    built = worktree_path(Path.cwd() if root is None else root, name) / "generated" / name
    return f"; the build's engine of {name} is at {built}" if name and (built / "engine").is_dir() else ""

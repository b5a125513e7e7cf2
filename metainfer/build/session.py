"""What one run needs, resolved once: target, repo root, worktree, run record, checkpoint, progress.

Also the two preparation steps of a run that are not the loop itself: the synthetic
checkpoint cache and rendering the engine from its template into the worktree.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from metainfer.build.config import BuildConfig, BuildError, state_dir
from metainfer.build.progress import Progress
from metainfer.build.records import RunRecord
from metainfer.build.worktree import TargetWorktree
from metainfer.targets import Target


@dataclass
class Session:
    """The resolved state of one build (or step) run.

    Attributes:
        config: the run's options.
        target: the target built.
        root: the main repository's root (the gate and the renderer run from here).
        worktree: the target's worktree on branch ``target.branch``.
        record: the run folder and ``run.json``.
        checkpoint: checkpoint folder the gate loads.
        progress: terminal progress printer.
        t_start: ``time.monotonic()`` when this process started the run (for the time limit).
    """

    config: BuildConfig
    target: Target
    root: Path
    worktree: TargetWorktree
    record: RunRecord
    checkpoint: Path
    progress: Progress
    t_start: float = field(default_factory=time.monotonic)

    def active_seconds(self) -> float:
        """Seconds this run has been working, summed over every process that ran it (resumes included)."""
        return self.record.state.get("active_seconds_before", 0.0) + (time.monotonic() - self.t_start)

    def save(self) -> None:
        """Update ``active_seconds`` and write ``run.json``."""
        self.record.state["active_seconds"] = round(self.active_seconds(), 1)
        self.record.save()


def checkpoint_key(model: str, quant: str, seed: int) -> str:
    """The cache folder name of a synthetic checkpoint: ``<facts digest>-<config digest>-<quant>-seed<S>-init<V>``.

    Keyed by what the weights depend on, never by the model's name: the facts digest (every
    config field the engine reads), a digest of the whole config the writer stores (a changed
    ``bos_token_id`` or GDN dtype under the same name is another checkpoint), and the
    initialisation's version (``metainfer.checkpoint.init.INIT_VERSION``).
    """
    import hashlib
    import json

    from metainfer.checkpoint.layout import gdn_fp32
    from metainfer.targets import get_model, get_quant

    from metainfer.checkpoint import init

    version = getattr(init, "INIT_VERSION", 1)  # the initialisation's version, where init.py declares one
    spec, q = get_model(model), get_quant(quant)
    config = hashlib.sha256(json.dumps([spec.config, gdn_fp32(spec)], sort_keys=True).encode()).hexdigest()[:8]
    return f"{spec.facts(q).digest}-{config}-{quant}-seed{seed}-init{version}"


def checkpoint_cache_path(root: Path, model: str, quant: str, seed: int) -> Path:
    """Where ``ensure_checkpoint`` keeps the synthetic checkpoint of ``model`` (name or config path) in ``quant``."""
    return state_dir(root) / "checkpoints" / checkpoint_key(model, quant, seed)


def ensure_checkpoint(root: Path, model: str, quant: str, seed: int, progress: Progress) -> Path:
    """The cached synthetic checkpoint ``.metainfer/checkpoints/<checkpoint_key>``, written once.

    ``model`` is a registry name or a config path (``ModelSpec.source``). Written into a temporary
    sibling and renamed, so a half-written folder is never reused.

    Raises:
        CheckpointError: from the writer.
    """
    from metainfer.checkpoint import write_checkpoint
    from metainfer.targets import get_model, get_quant

    dest = checkpoint_cache_path(root, model, quant, seed)
    if (dest / "config.json").is_file():
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    progress.line(None, f"writing a synthetic checkpoint of {get_model(model).name} (seed {seed}) to {dest}")
    write_checkpoint(get_model(model), get_quant(quant), tmp, seed)
    try:
        os.replace(tmp, dest)
    except OSError:  # another process finished first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def render_into(root: Path, target: Target, worktree: TargetWorktree) -> Path:
    """Render the target's engine from ``root``'s template into the worktree (``metainfer render`` as a subprocess).

    The subprocess runs from ``root`` so the renderer and template are the repository's own.

    Raises:
        BuildError: the renderer failed (its output is in the message).
    """
    argv = [sys.executable, "-m", "metainfer.cli", "render", "--model", target.model.source or target.model.name,
            "--quant", target.quant.name,
            "--gpu", target.gpu.name, "--out", str(worktree.path / "generated"), "--force"]
    proc = subprocess.run(argv, cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"rendering {target.name} failed (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-2000:]}")
    if not (worktree.engine_dir / "engine" / "__init__.py").is_file():
        raise BuildError(f"the renderer wrote no {worktree.engine_dir}/engine/__init__.py; check templates/engine/{target.model.family}")
    return worktree.engine_dir

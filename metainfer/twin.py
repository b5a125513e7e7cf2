"""The shallow twin of a candidate engine: its edits carried onto a render of the model's first layer periods
(docs/PARITY.md, "A float32 twin pass"). The gate's ``twin`` stage judges the result (``--twin-engine``).

A candidate engine is a render of the template for its model plus edits. ``twin_engine`` renders the template twice
from the candidate's own ``engine/rendered_for.json`` (its model config, quant and GPU): once as recorded (the base)
and once cut to ``periods`` layer periods (the twin). Files the two renders share are the candidate's, copied
verbatim; files the depth changes (``engine/target.py`` today) get the candidate's edits by a three-way merge
(``git merge-file``: base -> candidate applied to the twin); ``engine/rendered_for.json`` and ``ENGINE.md`` are the
twin's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from metainfer.errors import MetainferError
from metainfer.targets.gpus import GpuProfile

#: files of a render that are the twin's outright: records and prose, never edited by an iteration that matters
TWIN_OWNED = ("engine/rendered_for.json", "ENGINE.md")


class TwinCarryError(MetainferError):
    """The candidate's edits do not carry onto the twin (a merge conflict, or no render record)."""


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def carry_edits(candidate: Path, base: Path, twin: Path, dest: Path) -> Path:
    """Copy ``candidate`` (a target folder) to ``dest`` with the twin's shapes; return ``dest``.

    ``base`` and ``twin`` are renders of the candidate's template for the full model and for its twin.

    Raises:
        TwinCarryError: a file the depth changes was also edited by the candidate in a way that conflicts.
    """
    shutil.copytree(candidate, dest, ignore=shutil.ignore_patterns("__pycache__"))
    base_files, twin_files = _files(base), _files(twin)
    for rel in sorted(base_files | twin_files):
        b, t, c = base / rel, twin / rel, dest / rel
        if b.is_file() and t.is_file() and b.read_bytes() == t.read_bytes():
            continue  # the depth does not change it: the candidate's copy stands
        if rel in TWIN_OWNED or not b.is_file() or not c.is_file():
            if t.is_file():
                c.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(t, c)
            continue
        # three-way: the candidate's edits (base -> candidate) applied to the twin's render; rc > 0 = conflicts
        res = subprocess.run(["git", "merge-file", "-p", "--", str(c), str(b), str(t)], capture_output=True, timeout=60)
        if res.returncode != 0:
            raise TwinCarryError(f"twin: the candidate's edits to {rel} conflict with the twin's render of it "
                                 f"(git merge-file: {res.returncode if res.returncode > 0 else res.stderr.decode()[:200]}); "
                                 "keep model facts in engine/target.py as rendered")
        c.write_bytes(res.stdout)
    return dest


def twin_engine(candidate: Path, periods: int, workdir: Path) -> Path:
    """The candidate's twin target folder under ``workdir`` (rendered, carried); returns it.

    Raises:
        TwinCarryError: no ``engine/rendered_for.json`` in the candidate, or a conflicting edit.
        MetainferError: ``periods`` out of range for the model.
    """
    from metainfer.render import render_engine
    from metainfer.targets import make_target
    from metainfer.targets.shallow import write_shallow_model

    rec_path = candidate / "engine" / "rendered_for.json"
    if not rec_path.is_file():
        raise TwinCarryError(f"twin: {rec_path} is missing; the twin pass needs the render record of the candidate")
    rec = json.loads(rec_path.read_text())
    full = workdir / "models" / rec["model"]
    full.mkdir(parents=True, exist_ok=True)
    (full / "config.json").write_text(json.dumps(rec["config"]))
    shallow = write_shallow_model(str(full), periods, workdir / "models")
    base = render_engine(make_target(str(full), rec["quant"], rec["gpu"]), workdir / "base", force=True)
    twin = render_engine(make_target(str(shallow), rec["quant"], rec["gpu"]), workdir / "twin", force=True)
    return carry_edits(candidate, base, twin, workdir / "carried" / twin.name)


def auto_periods(device: str, checkpoint: Path) -> int:
    """Layer periods of the twin pass by default: 1 on a GPU whose parity reference is bf16 (a full-size model, where
    the float32 twin sees more than parity does), else 0 (off: parity's own reference is float32 already)."""
    from harness.reference_cache import default_reference_dtype

    return 1 if str(device).startswith("cuda") and default_reference_dtype(device, checkpoint) == "bfloat16" else 0


def auto_periods_for(gpu: GpuProfile, checkpoint: Path) -> int:
    """``auto_periods`` from the GPU profile's memory instead of the device (the build's loop process must not open a
    CUDA context): 1 when the float32 reference would not fit in half of ``gpu.memory_gib``, else 0; 0 on the CPU."""
    from harness.reference_cache import fp32_reference_fits

    return 0 if gpu.name == "cpu" or fp32_reference_fits(checkpoint, gpu.memory_gib * 2**30) else 1


def make_twin(candidate: Path, periods: int) -> tuple[Path, Path]:
    """(workdir, the candidate's twin target folder) in a fresh temporary folder (``metainfer-twin-*``) the caller
    removes; the folder to give the gate as ``--twin-engine``."""
    from metainfer.tempdirs import mkdtemp, try_root

    work = mkdtemp("twin", try_root())
    try:
        return work, twin_engine(candidate, periods, work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise

"""What the attempts share: the tiny CPU engine rendered once, the cached synthetic checkpoint, the judge's source.

Same target and checkpoint seed as ``tests/conftest.py`` (``qwen3.6-35b-a3b-tiny``, seed 1234),
so the table and the test suite judge the same engine on the same weights.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from metainfer.errors import MetainferError

TINY_MODEL = "qwen3.6-35b-a3b-tiny"
TINY_SEED = 1234


class SetupError(MetainferError):
    """The shared engine, checkpoint or judge source could not be prepared."""


def render_tiny(out_root: Path, quant: str = "bf16") -> Path:
    """Render the tiny engine for the CPU into ``out_root``; return its folder (``out_root/<target>``)."""
    from metainfer.render import render_engine
    from metainfer.targets import make_target

    return render_engine(make_target(TINY_MODEL, quant, "cpu"), out_root, force=True)


def cached_checkpoint(root: Path, quant: str = "bf16") -> Path:
    """The tiny synthetic checkpoint under ``<root>/.metainfer/cheats/``, written once (temp folder, then renamed)."""
    from metainfer.build.session import checkpoint_key
    from metainfer.checkpoint import write_checkpoint
    from metainfer.targets import get_model, get_quant

    # keyed like the build's cache: facts digest, config digest, quant, seed, init version (a tiny twin's
    # changed config under the same name must not reuse an old folder)
    dest = root / ".metainfer" / "cheats" / checkpoint_key(TINY_MODEL, quant, TINY_SEED)
    if (dest / "config.json").is_file():
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    write_checkpoint(get_model(TINY_MODEL), get_quant(quant), tmp, TINY_SEED, progress=False)
    try:
        os.replace(tmp, dest)
    except OSError:  # another process finished first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def judge_source(root: Path, ref: str | None, dest: Path) -> Path:
    """A folder holding the judge's ``harness/`` and ``metainfer/``: the working tree's when ``ref`` is None,
    else ``harness/`` of commit ``ref`` (``git archive``) beside the working tree's ``metainfer/`` (the engine
    rendered from today's template imports today's checkpoint reader), written under ``dest``.

    Raises:
        SetupError: ``ref`` is not a commit of the repository at ``root``.
    """
    if ref is None:
        return root
    proc = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", ref, "--", "harness"],
                          capture_output=True)
    if proc.returncode != 0:
        raise SetupError(f"--judge-ref {ref}: {proc.stderr.decode(errors='replace').strip()}; pass a commit of {root}")
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")
    shutil.copytree(root / "metainfer", dest / "metainfer", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest

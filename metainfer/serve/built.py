"""Which engine a target's build left: the head of its branch ``metainfer/<target>`` (the last accepted iteration).

The worktree ``.metainfer/worktrees/<target>`` holds that head only while it is clean: an interrupted build leaves an
uncommitted, ungated candidate there, and ``metainfer clean`` removes the worktree but keeps the branch. In both
cases the engine folder is exported from git (``git archive <branch> -- generated/<target>``) into a temporary folder
removed when the process exits. Used by ``metainfer serve`` and ``metainfer generate``.
"""

from __future__ import annotations

import atexit
import io
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from metainfer.errors import MetainferError
from metainfer.tempdirs import mkdtemp


@dataclass
class BuiltEngine:
    """The engine folder of a branch head.

    Attributes:
        path: ``generated/<target>`` in the clean worktree, or in the temporary export.
        sha: the branch head's commit.
        branch: ``metainfer/<target>``.
        exported_because: None when served from the worktree, else why it was exported (one phrase).
    """

    path: Path
    sha: str
    branch: str
    exported_because: str | None = None

    def describe(self) -> str:
        """One line: which commit is served, from where, and why an export."""
        where = f"exported from git to {self.path} ({self.exported_because})" if self.exported_because else f"at {self.path}"
        return f"engine: branch {self.branch} at commit {self.sha[:10]} (the last accepted iteration), {where}"


def _git(cwd: Path, *args: str) -> str:
    p = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else ""


def branch_engine(root: Path, target_name: str, kind: str = "serve") -> BuiltEngine | None:
    """The engine at the head of ``metainfer/<target_name>`` in the clone ``root``, or None when there is no such
    branch or its head has no engine. Exports it (into ``metainfer.tempdirs.mkdtemp(kind, root)``, removed at exit) unless the worktree
    exists, is at the branch head and has no uncommitted changes (untracked files included) under the engine folder.

    Raises:
        MetainferError: ``git archive`` failed.
    """
    from metainfer.build.config import worktree_path

    branch, rel = f"metainfer/{target_name}", f"generated/{target_name}"
    sha = _git(root, "rev-parse", "--verify", "-q", f"refs/heads/{branch}^{{commit}}")
    if not sha or not _git(root, "ls-tree", "--name-only", sha, "--", f"{rel}/engine/__init__.py"):
        return None
    wt = worktree_path(root, target_name)
    if (wt / rel / "engine" / "__init__.py").is_file() and (wt / ".git").exists():
        dirty = _git(wt, "status", "--porcelain", "--untracked-files=all", "--", rel)
        head = _git(wt, "rev-parse", "HEAD")
        if not dirty and head == sha:
            return BuiltEngine(wt / rel, sha, branch)
        why = (f"the worktree {wt} has uncommitted changes under {rel}, an unaccepted candidate" if dirty
               else f"the worktree {wt} is at {head[:10] or 'no commit'}, not the branch head")
    else:
        why = f"no worktree at {wt}, e.g. after `metainfer clean`"
    tmp = mkdtemp(kind, root)
    atexit.register(shutil.rmtree, tmp, True)
    p = subprocess.run(["git", "archive", "--format=tar", sha, "--", rel], cwd=root, capture_output=True)
    if p.returncode != 0:
        raise MetainferError(f"exporting {rel} of {branch} ({sha[:10]}): {p.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(p.stdout)) as tar:
        tar.extractall(tmp, filter="data")
    return BuiltEngine(tmp / rel, sha, branch, why)

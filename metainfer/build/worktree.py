"""The target's git worktree: branch ``metainfer/<target>``, never the user's checkout.

The worktree lives at ``<repo>/.metainfer/worktrees/<target>`` and has the branch checked
out; the agent edits it, the loop stages, diffs, commits or resets it. Its index and HEAD
are its own (git worktrees share only the object store and refs with the main checkout),
so the user's current branch, index and files are never touched.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

import git

from metainfer.build.config import BuildError

#: identity used for commits when the repository has no user.name / user.email configured
_FALLBACK_IDENTITY = {"name": "metainfer", "email": "metainfer@localhost"}


@dataclass(frozen=True)
class CandidateDiff:
    """What the agent changed in the worktree, relative to the branch head.

    Attributes:
        paths: repository-relative paths added, modified, deleted or renamed (both names for a rename).
        text: the unified diff (``git diff --binary``), empty when nothing changed.
    """

    paths: tuple[str, ...]
    text: str

    def outside(self, prefix: str) -> list[str]:
        """Paths not under the folder ``prefix`` (e.g. ``generated/<target>/``)."""
        prefix = prefix.rstrip("/") + "/"
        return [p for p in self.paths if not p.startswith(prefix)]


class TargetWorktree:
    """The worktree of one target's branch.

    Args:
        root: the main repository's work tree root.
        target_name: ``<model>-<quant>-<gpu>``.
        path: where the worktree lives (see ``metainfer.build.config.worktree_path``).
    """

    def __init__(self, root: Path, target_name: str, path: Path):
        self.root = Path(root)
        self.target_name = target_name
        self.branch = f"metainfer/{target_name}"
        self.path = Path(path)
        self.engine_rel = f"generated/{target_name}"
        self._main = git.Repo(self.root)
        self._repo: git.Repo | None = None

    @property
    def engine_dir(self) -> Path:
        """``<worktree>/generated/<target>``: the only folder an agent may change."""
        return self.path / self.engine_rel

    @property
    def repo(self) -> git.Repo:
        """The worktree as a gitpython repository (after ``ensure``)."""
        if self._repo is None:
            raise BuildError(f"worktree {self.path} is not set up; call ensure() first")
        return self._repo

    def ensure(self) -> "TargetWorktree":
        """Create the worktree (and the branch from the current HEAD, if new) or reopen it.

        Raises:
            BuildError: the branch is checked out elsewhere, or the path holds something that is not this worktree.
        """
        if (self.path / ".git").exists():
            repo = git.Repo(self.path)
            if repo.head.is_detached or repo.active_branch.name != self.branch:
                raise BuildError(f"{self.path} is a worktree but not on {self.branch}; remove it with `git worktree remove {self.path}`")
            self._repo = repo
            return self
        if self.path.exists() and any(self.path.iterdir()):
            raise BuildError(f"{self.path} exists and is not a git worktree; move it away")
        self._main.git.worktree("prune")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.branch in [h.name for h in self._main.heads]:
                self._main.git.worktree("add", str(self.path), self.branch)
            else:
                self._main.git.worktree("add", "-b", self.branch, str(self.path), "HEAD")
        except git.GitCommandError as err:
            raise BuildError(f"cannot create the worktree of {self.branch} at {self.path}: {err.stderr.strip()}") from None
        self._repo = git.Repo(self.path)
        return self

    def head_sha(self) -> str:
        """The commit at the branch head (40 hex digits)."""
        return self.repo.head.commit.hexsha

    def has_engine(self) -> bool:
        """True when the branch head holds ``generated/<target>/engine/__init__.py``."""
        return bool(self.repo.git.ls_tree("HEAD", "--", f"{self.engine_rel}/engine/__init__.py").strip())

    def reset_clean(self) -> None:
        """Discard every change in the worktree: tracked edits, staged files, untracked and ignored files."""
        self.repo.git.reset("--hard", "HEAD")
        self.repo.git.clean("-fdx")

    def stage_diff(self) -> CandidateDiff:
        """Stage everything the agent changed (ignored files excluded) and return the diff against the head."""
        self.repo.git.add("-A")
        names = self.repo.git.diff("--cached", "--name-only", "--no-renames", "HEAD")
        text = self.repo.git.diff("--cached", "--binary", "--no-renames", "HEAD")
        return CandidateDiff(tuple(n for n in names.splitlines() if n), text + "\n" if text else "")

    def commit(self, message: str) -> str:
        """Commit what is staged with ``message`` (summary, blank line, trailers) and return the new sha."""
        env = {}
        reader = self._main.config_reader()
        if not reader.has_option("user", "name") or not reader.has_option("user", "email"):
            n, e = _FALLBACK_IDENTITY["name"], _FALLBACK_IDENTITY["email"]
            env = {"GIT_AUTHOR_NAME": n, "GIT_AUTHOR_EMAIL": e, "GIT_COMMITTER_NAME": n, "GIT_COMMITTER_EMAIL": e}
        self.repo.git.commit("--no-verify", "-q", "-m", message, env={**os.environ, **env})
        return self.head_sha()

    def staged_tree(self) -> str:
        """The tree object of what is staged (``git write-tree``): exactly what ``commit`` would record."""
        return self.repo.git.write_tree()

    def export(self, sha: str, dest: Path) -> Path:
        """Write the engine folder as of commit (or tree) ``sha`` into ``dest`` and return ``dest/generated/<target>``.

        Raises:
            BuildError: the commit holds no engine folder.
        """
        try:
            data = self.repo.git.archive("--format=tar", sha, "--", self.engine_rel, stdout_as_string=False)
        except git.GitCommandError as err:
            raise BuildError(f"commit {sha[:10]} has no {self.engine_rel}: {err.stderr.strip()}") from None
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
        return Path(dest) / self.engine_rel

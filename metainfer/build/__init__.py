"""The build loop: propose → gate → commit or reset → record, on branch ``metainfer/<target>`` in a worktree.

Public API: ``BuildConfig``, ``run_build`` (``metainfer build``), ``run_step`` (``metainfer step``),
``RunRecord`` and ``write_summary`` / ``summary_markdown`` (``metainfer report``).
"""

from metainfer.build.config import BuildConfig, BuildError, find_repo_root, worktree_path
from metainfer.build.loop import run_build
from metainfer.build.records import RunRecord
from metainfer.build.report import summary_markdown, write_summary
from metainfer.build.step import run_step

__all__ = ["BuildConfig", "BuildError", "RunRecord", "find_repo_root", "run_build", "run_step", "summary_markdown",
           "worktree_path", "write_summary"]

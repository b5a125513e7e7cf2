"""The build loop end to end: real temporary git repos, the real CLI, real gate subprocesses.

Each test copies the project (``metainfer/``, ``harness/``, ``templates/``) into a fresh git repo
and adds a test knob to the engine template (``engine/test_knobs.py``): ``generate`` (what the
benchmark times) sleeps ``SLOW_S`` seconds, and every forward's logits are scaled by ``LOGIT_SCALE``
(what parity compares). Patches flip the knobs, so speed changes are real: the baseline sleeps
``BASE_SLOW_S``, "faster" drops the sleep, "slower" sleeps again, "broken" scales the logits by 1.5.
The sleep is fixed, not a multiple of the call's compute: with a sleep as long as the compute (a 2x gap)
a loaded CI machine stretched one candidate call past the baseline's and the candidate lost a round.

The mechanics tests share a run whose baseline is rendered and committed but not gated, and
resume it with their own patches; the end-to-end test (slow) gates everything for real.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL, QUANT = "qwen3.6-35b-a3b-tiny", "bf16"
TARGET = f"{MODEL}-{QUANT}-cpu"
ENGINE = f"generated/{TARGET}/engine"
BASE_SLOW_S = 1.0  # the template's sleep per generate call, s (a tiny ttft call computes in ~0.05 s)
GATE_OPTS = ["--rounds", "2", "--workloads", "ttft"]
KNOBS = '''"""Test knobs (tests/test_build_loop.py): real slowness and a real parity break, switched by patches."""

import time

SLOW_S = {slow}
LOGIT_SCALE = {scale}


def start() -> float:
    return time.perf_counter()


def slow_down(t0: float, results):
    if SLOW_S:
        time.sleep(SLOW_S)
    return results


def distort(out):
    if LOGIT_SCALE != 1.0:
        out.logits.mul_(LOGIT_SCALE)
    return out
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _hook_template(repo: Path) -> None:
    """Make the template's ``generate`` (what the benchmark times) sleep SLOW_S seconds, and
    scale every forward's logits by LOGIT_SCALE (what parity compares); parity itself is not slowed."""
    eng = repo / "templates/engine/qwen3_5_moe/engine"
    (eng / "test_knobs.py").write_text(KNOBS.format(slow=BASE_SLOW_S, scale=1.0))
    src = (eng / "runtime.py").read_text().splitlines(keepends=True)

    def body_start(prefix: str) -> int:
        i = next(k for k, ln in enumerate(src) if ln.startswith(prefix))
        while not src[i].rstrip().endswith(":"):  # a signature over several lines
            i += 1
        return i + 1

    def replace_return(start: int, name: str, wrapped: str) -> None:
        j = next(k for k in range(start, len(src)) if src[k].strip() == f"return {name}")
        src[j] = src[j].replace(f"return {name}", f"return {wrapped}")

    replace_return(body_start("    def _run("), "out", "_knobs.distort(out)")
    g = body_start("    def generate(")
    replace_return(g, "results", "_knobs.slow_down(_t0, results)")
    src.insert(g, "        _t0 = _knobs.start()\n")  # before the docstring: harmless, generate keeps working
    k = next(k for k, ln in enumerate(src) if ln.startswith("import torch"))
    src.insert(k + 1, "\nfrom . import test_knobs as _knobs\n")
    (eng / "runtime.py").write_text("".join(src))


def _patch(path: str, before: str, after: str, title: str) -> str:
    body = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}")
    return title + "\n" + "".join(body)


def metainfer(repo: Path, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run the CLI from ``repo`` (its own copy of the package) as a subprocess."""
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    p = subprocess.run([sys.executable, "-m", "metainfer.cli", *args], cwd=repo, capture_output=True, text=True,
                       timeout=timeout, env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"metainfer {' '.join(args)} exited {p.returncode}\n{p.stdout}\n{p.stderr[-4000:]}")
    return p


def _make_project(repo: Path) -> Path:
    """A git repo with the project layout (``main`` at one commit) and the hooked engine template."""
    repo.mkdir(parents=True)
    for d in ("metainfer", "harness", "templates"):
        shutil.copytree(ROOT / d, repo / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    _hook_template(repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "t")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "project")
    return repo


@pytest.fixture(scope="module")
def given_baseline(tmp_path_factory, tiny_checkpoint) -> Path:
    """The project plus a run whose baseline (iteration 0) is the rendered engine, committed but NOT gated.

    For the tests of the loop's mechanics (rejections before the gate, gate timeouts, kill and resume,
    step), which never look at the baseline's figures: a real parity + bench gate of the tiny engine
    takes minutes on a loaded 2-core machine. The end-to-end test below gates its own baseline.
    """
    from metainfer.build.config import BuildConfig
    from metainfer.build.decision import Decision
    from metainfer.build.iteration import Verdict, write_iteration
    from metainfer.build.progress import Progress
    from metainfer.build.resume import open_session
    from metainfer.build.session import render_into

    project = _make_project(tmp_path_factory.mktemp("given") / "repo")
    base = project.parent
    cfg = BuildConfig(MODEL, QUANT, "cpu", agent="scripted", iterations=0, checkpoint=tiny_checkpoint(QUANT),
                      runs_dir=base / "runs", repo_root=project)
    s, _, _ = open_session(cfg, Progress())
    render_into(project, s.target, s.worktree)
    diff = s.worktree.stage_diff()
    sha = s.worktree.commit(f"Render the {TARGET} engine (test fixture, not gated)\n\nRun-Id: {s.record.run_id}\nIteration: 0\n")
    write_iteration(s, 0, summary="rendered baseline (not gated)", diff=diff,
                    verdict=Verdict(Decision(True, "given baseline"), commit=sha), started="", cumulative=1.0)
    s.record.state.update({"baseline": {"iteration": 0, "commit": sha}, "next_iteration": 1, "status": "finished",
                           "best": {"iteration": 0, "commit": sha, "cumulative_speedup": 1.0}})
    s.save()
    return base


def _copy(base: Path, dest: Path) -> tuple[Path, Path, str]:
    """A private copy of the baseline repo and runs, without its worktree (the loop re-creates it from the branch)."""
    shutil.copytree(base, dest, symlinks=True, ignore=shutil.ignore_patterns("worktrees"))
    repo = dest / "repo"
    _git(repo, "worktree", "prune")
    run_id = next((dest / "runs").iterdir()).name
    return repo, dest / "runs", run_id


def _state(runs: Path, run_id: str) -> dict:
    return json.loads((runs / run_id / "run.json").read_text())


def _report(runs: Path, run_id: str, i: int) -> dict:
    return json.loads((runs / run_id / f"iter-{i:03d}" / "report.json").read_text())


def _knobs_patch(tmp: Path, name: str, title: str, before: tuple, after: tuple) -> Path:
    f = tmp / name
    f.write_text(_patch(f"{ENGINE}/test_knobs.py", KNOBS.format(slow=before[0], scale=before[1]),
                        KNOBS.format(slow=after[0], scale=after[1]), title))
    return f


def _checkout(repo: Path) -> tuple[str, str, str]:
    return _git(repo, "rev-parse", "HEAD"), _git(repo, "branch", "--show-current"), _git(repo, "status", "--porcelain")


def test_outside_paths_and_harness_edits_are_rejected_without_a_gate(given_baseline, tmp_path):
    repo, runs, run_id = _copy(given_baseline, tmp_path / "c")
    hashing = (repo / "harness/hashing.py").read_text()
    (tmp_path / "p1.diff").write_text(_patch("harness/hashing.py", hashing, hashing + "# relax the judge\n", "edit the judge"))
    (tmp_path / "p2.diff").write_text(_patch("README.md", "", "hello\n", "write a README").replace("--- a/README.md", "--- /dev/null"))
    (tmp_path / "p3.diff").write_text(_patch(f"{ENGINE}/test_knobs.py", "SLOW_S = 7\n", "SLOW_S = 8\n", "stale"))
    head = _git(repo, "rev-parse", f"metainfer/{TARGET}")
    metainfer(repo, "build", "--resume", run_id, "--runs-dir", str(runs), "--iterations", "3",
              *(f"--script={tmp_path / f'p{k}.diff'}" for k in (1, 2, 3)))
    r1, r2, r3 = (_report(runs, run_id, i) for i in (1, 2, 3))
    # a patch that does not apply is the agent failing: a rejected iteration with the traceback kept
    assert not r3["accepted"] and r3["reason"].startswith("agent error") and "does not apply" in r3["reason"]
    assert "Traceback" in json.loads((runs / run_id / "iter-003" / "transcript.json").read_text())["error"]
    assert not r1["accepted"] and "outside" in r1["reason"] and "harness/hashing.py" in r1["reason"] and r1["gate"] is None
    assert not r2["accepted"] and "README.md" in r2["reason"]
    assert "relax the judge" in (runs / run_id / "iter-001" / "candidate.diff").read_text()
    assert _git(repo, "rev-parse", f"metainfer/{TARGET}") == head  # nothing committed
    wt = repo / ".metainfer/worktrees" / TARGET
    assert _git(wt, "status", "--porcelain", "--ignored") == "" and (wt / "harness/hashing.py").read_text() == hashing


def test_gate_timeout_is_a_rejected_iteration(given_baseline, tmp_path):
    repo, runs, run_id = _copy(given_baseline, tmp_path / "c")
    faster = _knobs_patch(tmp_path, "f.diff", "drop the sleep", (BASE_SLOW_S, 1.0), (0.0, 1.0))
    t0 = time.monotonic()
    metainfer(repo, "build", "--resume", run_id, "--runs-dir", str(runs), "--iterations", "1", "--gate-timeout", "3",
              "--script", str(faster))
    assert time.monotonic() - t0 < 60
    r = _report(runs, run_id, 1)
    assert not r["accepted"] and r["gate"]["timed_out"] and "timed out after 3s" in r["reason"]
    assert "killed" in (runs / run_id / "iter-001" / "gate.log").read_text()
    st = _state(runs, run_id)
    assert st["status"] == "finished" and st["next_iteration"] == 2 and st["best"]["iteration"] == 0


def test_time_limit_stops_at_an_iteration_boundary(given_baseline, tmp_path):
    repo, runs, run_id = _copy(given_baseline, tmp_path / "c")
    faster = _knobs_patch(tmp_path, "f.diff", "drop the sleep", (BASE_SLOW_S, 1.0), (0.0, 1.0))
    metainfer(repo, "build", "--resume", run_id, "--runs-dir", str(runs), "--iterations", "3", "--time-limit", "0.001",
              "--script", str(faster))
    st = _state(runs, run_id)
    assert st["status"] == "stopped" and st["stop_reason"].startswith("time limit of 0.001 min reached")
    assert st["next_iteration"] == 1 and not (runs / run_id / "iter-001").exists()
    assert f"continue with: metainfer build --resume {run_id} --runs-dir {runs} --time-limit" in st["stop_reason"]
    assert "stopped" in (runs / run_id / "summary.md").read_text()
    # the same resume without a larger limit would stop again at once: refused, naming the flag, nothing changed
    again = metainfer(repo, "build", "--resume", run_id, "--runs-dir", str(runs), check=False)
    assert again.returncode != 0 and "time limit of 0.001 min reached" in again.stderr and "--time-limit" in again.stderr
    assert _state(runs, run_id)["status"] == "stopped"


def test_resume_after_sigkill_mid_gate_redoes_the_iteration(given_baseline, tmp_path):
    repo, runs, run_id = _copy(given_baseline, tmp_path / "c")
    faster = _knobs_patch(tmp_path, "f.diff", "drop the sleep", (BASE_SLOW_S, 1.0), (0.0, 1.0))
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = subprocess.Popen([sys.executable, "-m", "metainfer.cli", "build", "--resume", run_id, "--runs-dir", str(runs),
                             "--iterations", "2", "--script", str(faster), "--script", str(faster)],
                            cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    gate_pid = None
    while time.monotonic() < deadline and gate_pid is None:
        time.sleep(0.5)
        flight = _state(runs, run_id).get("in_flight") or {}
        gate_pid = flight.get("gate_pid") if flight.get("iteration") == 1 else None
    assert gate_pid, "the gate of iteration 1 never started"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for _ in range(50):  # the gate dies with its parent (PR_SET_PDEATHSIG)
        if not Path(f"/proc/{gate_pid}").exists() or "Z" in Path(f"/proc/{gate_pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"gate pid {gate_pid} survived the loop's SIGKILL")
    assert not (runs / run_id / "iter-001" / "report.json").exists()
    st = _state(runs, run_id)
    assert st["status"] == "running" and st["in_flight"]["iteration"] == 1
    # resume: iteration 1 is redone (with a short timeout so the test stays fast), then 2; the counter continues
    p = metainfer(repo, "build", "--resume", run_id, "--runs-dir", str(runs), "--gate-timeout", "3")
    assert "redoing it" in p.stderr
    st = _state(runs, run_id)
    assert st["status"] == "finished" and st["next_iteration"] == 3 and len(st["resumed"]) == 2
    assert [_report(runs, run_id, i)["iteration"] for i in (1, 2)] == [1, 2]
    assert _report(runs, run_id, 1)["summary"] == "drop the sleep"
    wt = repo / ".metainfer/worktrees" / TARGET
    assert _git(wt, "status", "--porcelain") == ""


def test_step_rejects_outside_changes_and_leaves_them(given_baseline, tmp_path, tiny_checkpoint):
    repo, runs, _ = _copy(given_baseline, tmp_path / "c")
    wt = repo / ".metainfer/worktrees" / TARGET
    _git(repo, "worktree", "add", "-q", str(wt), f"metainfer/{TARGET}")  # the copy left the worktree behind
    (wt / "NOTES.md").write_text("my notes\n")
    p = metainfer(repo, "step", "--model", MODEL, "--quant", QUANT, "--gpu", "cpu", "-m", "notes",
                  "--runs-dir", str(runs), "--checkpoint", str(tiny_checkpoint(QUANT)), check=False)
    assert p.returncode == 1
    run = max((runs).iterdir(), key=lambda d: d.name)
    r = _report(runs, run.name, 1)
    assert not r["accepted"] and "NOTES.md" in r["reason"] and (wt / "NOTES.md").read_text() == "my notes\n"
    assert _state(runs, run.name)["agent"] == "step"


@pytest.mark.slow
def test_scripted_run_commits_the_faster_and_rejects_broken_and_slower(tmp_path, tiny_checkpoint):
    """End to end with real gates: baseline rendered and gated, then faster (accepted), broken, slower (rejected).

    Slow: four real gates (parity against HF, A/B ttft) of the tiny engine; minutes on a quiet 2-core machine.
    """
    repo = _make_project(tmp_path / "repo")
    runs = tmp_path / "runs"
    before = _checkout(repo)
    p1 = _knobs_patch(tmp_path, "1.diff", "drop the sleep in every forward", (BASE_SLOW_S, 1.0), (0.0, 1.0))
    p2 = _knobs_patch(tmp_path, "2.diff", "scale the logits (breaks parity)", (0.0, 1.0), (0.0, 1.5))
    p3 = _knobs_patch(tmp_path, "3.diff", "sleep again", (0.0, 1.0), (BASE_SLOW_S, 1.0))
    out = metainfer(repo, "build", "--model", MODEL, "--quant", QUANT, "--gpu", "cpu", "--iterations", "3",
                    "--checkpoint", str(tiny_checkpoint(QUANT)), "--runs-dir", str(runs), *GATE_OPTS,
                    "--script", str(p1), "--script", str(p2), "--script", str(p3), timeout=3600)
    run_id = next(runs.iterdir()).name
    r0 = _report(runs, run_id, 0)
    assert r0["accepted"] and r0["figures"]["parity_ok"] and r0["figures"]["noise"] is not None
    r1, r2, r3 = (_report(runs, run_id, i) for i in (1, 2, 3))
    assert r1["accepted"] and r1["reason"].startswith("faster"), r1["reason"]
    assert not r2["accepted"] and r2["reason"].startswith("parity failed"), r2["reason"]
    assert not r3["accepted"] and r3["reason"].startswith(("slower", "within noise")), r3["reason"]
    # (its measured speedup is not asserted below 1: on loaded CI cores the same engine has timed 4.6x off itself;
    # what must hold is the verdict above, and the report's noise-run warning says when timings were unsteady)
    # branch: project, rendered baseline, the one accepted candidate; trailers carry the figures
    log = _git(repo, "log", "--format=%H%x00%B%x01", f"metainfer/{TARGET}").split("\x01")
    head_sha, head_msg = log[0].strip().split("\x00")
    assert head_sha == r1["commit"] and head_msg.startswith("drop the sleep in every forward")
    from metainfer.build.decision import parse_trailers

    t = parse_trailers(head_msg)
    assert t["Run-Id"] == run_id and t["Iteration"] == "1" and float(t["Speedup"]) > 1.0 + float(t["Noise"])
    assert float(t["Parity-Max-Rel-Err"]) <= r1["figures"]["tolerance"] and "TTFT-ms" in t and t["Gate-Seed"]
    assert len([x for x in log if x.strip()]) == 3 and "\x00Render the " in log[1]
    # records of every iteration, a summary with a row per iteration, an HTML with the plot
    for i in range(4):
        d = runs / run_id / f"iter-{i:03d}"
        assert all((d / f).is_file() for f in ("report.md", "report.json", "candidate.diff", "gate.json", "gate.log", "transcript.json"))
    assert "LOGIT_SCALE = 1.5" in (runs / run_id / "iter-002" / "candidate.diff").read_text()
    summary = (runs / run_id / "summary.md").read_text()
    assert summary.count("\n| ") == 5 and "accepted 1 of 3 candidates" in summary
    rep = metainfer(repo, "report", run_id, "--runs-dir", str(runs))
    assert "drop the sleep" in rep.stdout and "summary.html" in rep.stdout
    assert "[iter 2]" in out.stderr or "[iter 2 " in out.stderr
    # the parity stage's own progress reaches the terminal while it runs (not only its end)
    assert "  reference: " in out.stderr and "  engine: teacher-forced" in out.stderr, out.stderr[-3000:]
    assert _checkout(repo) == before  # the user's HEAD, branch and working tree untouched


def test_resume_adopts_a_commit_made_just_before_the_kill(given_baseline, tmp_path):
    """Killed between the commit and the record: resume records the commit as accepted, never gates or commits it again."""
    repo, runs, run_id = _copy(given_baseline, tmp_path / "c")
    wt = repo / ".metainfer/worktrees" / TARGET
    _git(repo, "worktree", "add", "-q", str(wt), f"metainfer/{TARGET}")
    (wt / ENGINE / "test_knobs.py").write_text(KNOBS.format(slow=0.0, scale=1.0))
    _git(wt, "add", "-A")
    _git(wt, "commit", "-q", "-m", f"drop the sleep\n\nSpeedup: 1.9000\nGate-Seed: 1\nRun-Id: {run_id}\nIteration: 1\n")
    sha = _git(wt, "rev-parse", "HEAD")
    gate = {"schema": 1, "ok": True, "stages": [{"name": n, "ok": True, "seconds": 1.0, "error": None}
                                                 for n in ("static", "parity", "bench")],
            "parity": {"ok": True, "max_rel_err": 0.003, "tolerance": 0.03},
            "bench": {"scaled_down": True, "workloads": {}, "objective": {"speedup": 1.9, "noise": 0.1, "beats_baseline": True}}}
    (runs / run_id / "iter-001").mkdir()
    (runs / run_id / "iter-001" / "gate.json").write_text(json.dumps(gate))
    st = _state(runs, run_id)
    st.update({"status": "running", "in_flight": {"iteration": 1, "gate_pid": None}})
    (runs / run_id / "run.json").write_text(json.dumps(st))
    p = metainfer(repo, "build", "--resume", run_id, "--runs-dir", str(runs), "--iterations", "1")
    assert "adopted commit" in p.stderr
    r = _report(runs, run_id, 1)
    assert r["accepted"] and r["commit"] == sha and r["cumulative_speedup"] == pytest.approx(1.9)
    st = _state(runs, run_id)
    assert st["best"] == {"iteration": 1, "commit": sha, "cumulative_speedup": pytest.approx(1.9)} and st["next_iteration"] == 2
    assert _git(repo, "rev-parse", f"metainfer/{TARGET}") == sha  # not committed twice


def test_twin_periods_refuses_a_candidate_whose_edits_do_not_carry_onto_its_twin(given_baseline, tmp_path):
    """--twin-periods 1: the build makes each candidate's shallow twin; an edit of a depth fact in target.py cannot
    be carried onto it, so the iteration is red at its twin stage without a gate run, and --twin-periods is kept."""
    repo, runs, run_id = _copy(given_baseline, tmp_path / "c")
    wt_target = _git(repo, "show", f"metainfer/{TARGET}:{ENGINE}/target.py") + "\n"
    assert "num_layers=8," in wt_target
    (tmp_path / "depth.diff").write_text(_patch(f"{ENGINE}/target.py", wt_target,
                                                wt_target.replace("num_layers=8,", "num_layers=8,  # hard-coded depth", 1),
                                                "hard-code the depth"))
    head = _git(repo, "rev-parse", f"metainfer/{TARGET}")
    t0 = time.monotonic()
    metainfer(repo, "build", "--resume", run_id, "--runs-dir", str(runs), "--iterations", "1", "--twin-periods", "1",
              "--script", str(tmp_path / "depth.diff"))
    assert time.monotonic() - t0 < 120  # no parity, no bench
    r = _report(runs, run_id, 1)
    assert not r["accepted"] and "twin stage" in r["reason"] and "engine/target.py" in r["reason"]
    gate = json.loads((runs / run_id / "iter-001" / "gate.json").read_text())
    assert gate["ok"] is False and [st["name"] for st in gate["stages"]] == ["twin"]
    assert _state(runs, run_id)["gate"]["twin_periods"] == 1
    assert _git(repo, "rev-parse", f"metainfer/{TARGET}") == head


def test_a_twin_engine_adds_the_twin_stage_to_the_gates_defaults(tmp_path, tiny_checkpoint):
    """The gate's default stages gain ``twin`` when given --twin-engine (the build passes it), not otherwise; the
    build's request puts both flags on the gate's command line."""
    from harness.gate import parse_args
    from metainfer.build.gate_runner import GateRequest

    ck = tiny_checkpoint(QUANT)
    eng = tmp_path / "e"
    eng.mkdir()
    common = ["--engine", str(eng), "--checkpoint", str(ck), "--gpu", "cpu", "--json", str(tmp_path / "g.json")]
    assert "twin" not in parse_args(common).stages
    assert parse_args(common + ["--twin-engine", str(eng)]).stages == ("static", "parity", "twin", "bench")
    assert parse_args(common + ["--twin-engine", str(eng), "--stages", "static"]).stages == ("static",)
    argv = GateRequest(engine=eng, baseline=eng, checkpoint=ck, gpu="cpu", seed=1, twin_engine=tmp_path / "t",
                       twin_periods=2).argv(tmp_path / "g.json")
    assert argv[argv.index("--twin-engine") + 1] == str(tmp_path / "t") and argv[argv.index("--twin-periods") + 1] == "2"
    assert "--twin-engine" not in GateRequest(engine=eng, baseline=eng, checkpoint=ck, gpu="cpu", seed=1).argv(tmp_path / "g")


@pytest.mark.parametrize("model,gpu,expected", [("qwen3.6-35b-a3b", "h200", 1), ("qwen3.6-35b-a3b", "cpu", 0),
                                                ("qwen3.6-35b-a3b-tiny", "h200", 0)])
def test_the_builds_default_twin_periods_follow_the_parity_references_dtype(tmp_path, model, gpu, expected):
    """On by default only where parity's reference is bf16 (the fp32 model over half the GPU's memory): a full-size
    model on an H200; off on the CPU and for a tiny model (whose reference is float32 already)."""
    from metainfer.targets import get_gpu, get_model
    from metainfer.twin import auto_periods_for

    (tmp_path / "config.json").write_text(json.dumps(get_model(model).config))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    assert auto_periods_for(get_gpu(gpu), tmp_path) == expected

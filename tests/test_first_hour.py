"""A newcomer's first hour: the plan before work, the refusal of full-size work on a CPU, and Ctrl-C at any point.

Real subprocesses of the CLI and real signals: SIGINT during a checkpoint write (alone and inside
``metainfer build``) and during a gate; each must leave no partial files, no temporary exports
(``TMPDIR`` is a private folder here, so leftovers are visible) and, for a build, a run marked
``interrupted`` whose stop reason is the exact resume command.
"""

from __future__ import annotations

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
TINY = "qwen3.6-35b-a3b-tiny"


def _default_sigint() -> None:
    """In the child before exec: SIGINT at its default, whatever the test runner inherited (a background job's
    shell sets it to ignored, and Python then installs no KeyboardInterrupt handler: Ctrl-C would do nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _env(tmp: Path) -> dict[str, str]:
    tmpdir = tmp / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return {**env, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"}


def _cli(*args: str, cwd: Path = ROOT, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metainfer.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _project(dest: Path) -> Path:
    """A git repo with the project layout at one commit (the loop needs one; the checkout is never touched)."""
    dest.mkdir(parents=True)
    for d in ("metainfer", "harness", "templates"):
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / ".gitignore", dest / ".gitignore")
    for cmd in (["init", "-q", "-b", "main"], ["config", "user.name", "t"], ["config", "user.email", "t@t"], ["add", "-A"],
                ["commit", "-q", "-m", "project"]):
        subprocess.run(["git", *cmd], cwd=dest, check=True, capture_output=True)
    return dest


def _interrupt_when(proc: subprocess.Popen, ready, timeout: float = 240) -> None:
    """Send SIGINT to ``proc`` as soon as ``ready()`` is true; fail if it never is or the process ended first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process ended (exit {proc.returncode}) before the moment to interrupt it:\n{err[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the moment to interrupt never came")
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path):
    runs = tmp_path / "runs"
    t0 = time.monotonic()
    p = _cli("build", "--model", "qwen3.6-35b-a3b", "--quant", "nvfp4", "--gpu", "cpu", "--dry-run", "--runs-dir", str(runs))
    assert p.returncode == 2, p.stderr  # the plan, then the refusal the real run would give, with its exit status
    out = p.stdout
    assert "write a synthetic checkpoint, 24.5 GB" in out and "render templates/engine/qwen3_5_moe" in out
    assert "4 × (static → parity → bench)" in out and "ttft, decode-bs1, conc32" in out and "per gate" in out
    assert f"--model {'qwen3.6-35b-a3b'}-tiny" in out and "--full-size-on-cpu" in out  # the real run would be refused
    assert not runs.exists()
    tiny = _cli("build", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--dry-run", "--iterations", "1",
                "--runs-dir", str(runs))
    assert tiny.returncode == 0 and "2 × (static" in tiny.stdout and "refused" not in tiny.stdout, tiny.stdout
    assert "(~1 s)" in tiny.stdout  # a 5 MB tiny checkpoint writes in under a second
    assert f".metainfer/worktrees/{TINY}-bf16-cpu/generated/{TINY}-bf16-cpu/" in tiny.stdout  # where the engine lives
    assert not runs.exists()
    assert time.monotonic() - t0 < 120


@pytest.mark.parametrize("flags, names", [
    (("--workloads", "ttft,foo"), ("unknown workloads ['foo']", "known: ttft")),
    (("--workloads", "conc-32"), ("did you mean conc32?",)),
    (("--script", "examples/nope"), ("examples/nope does not exist",)),
    (("--script", "templates"), ("no .diff or .patch file",)),
    (("--scale", "huge"), ("--scale must be cpu or full",)),
])
def test_bad_build_options_are_refused_before_any_work(tmp_path, flags, names):
    runs = tmp_path / "runs"
    for extra in ((), ("--dry-run",)):  # the plan refuses what the run would
        p = _cli("build", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", *flags, *extra, "--runs-dir", str(runs))
        assert p.returncode == 2 and all(n in p.stderr for n in names), (extra, p.stdout, p.stderr)
        assert not runs.exists() and "Traceback" not in p.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal of a machine without a GPU")
def test_the_seed_command_without_its_gpu_names_the_tiny_twin(tmp_path):
    runs = tmp_path / "runs"
    full = _cli("build", "--model", "qwen3.6-35b-a3b", "--quant", "nvfp4", "--gpu", "b200", "--runs-dir", str(runs))
    assert full.returncode == 2 and "no CUDA device" in full.stderr and "--model qwen3.6-35b-a3b-tiny" in full.stderr
    tiny = _cli("build", "--model", TINY, "--quant", "nvfp4", "--gpu", "h200", "--runs-dir", str(runs))
    assert tiny.returncode == 2 and "use --gpu cpu here" in tiny.stderr and "tiny twin" not in tiny.stderr
    assert not runs.exists()


def test_full_size_on_the_cpu_is_refused_within_seconds(tmp_path):
    runs = tmp_path / "runs"
    t0 = time.monotonic()
    p = _cli("build", "--model", "qwen3.6-35b-a3b", "--quant", "nvfp4", "--gpu", "cpu", "--runs-dir", str(runs))
    elapsed = time.monotonic() - t0
    assert p.returncode == 2 and elapsed < 60, (elapsed, p.stderr)
    msg = p.stderr.strip()
    assert msg.startswith("error:") and len(msg.splitlines()) == 1
    assert "--model qwen3.6-35b-a3b-tiny" in msg and "--full-size-on-cpu" in msg and "25 GB" in msg
    assert not runs.exists()


def test_ctrl_c_during_a_checkpoint_write_removes_the_partial_files(tmp_path):
    out = tmp_path / "ck"
    proc = subprocess.Popen([sys.executable, "-m", "metainfer.cli", "checkpoint", "--model", TINY, "--quant", "bf16",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(tmp_path), preexec_fn=_default_sigint)
    _interrupt_when(proc, lambda: any(out.glob("model-*.tmp.safetensors")))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "interrupted: removed the partial checkpoint folder" in err and str(out) in err and "Traceback" not in err
    assert not out.exists()


def test_ctrl_c_while_a_build_writes_its_checkpoint_leaves_a_resumable_interrupted_run(tmp_path):
    repo = _project(tmp_path / "repo")
    runs = tmp_path / "runs"
    cache = repo / ".metainfer" / "checkpoints"
    proc = subprocess.Popen([sys.executable, "-m", "metainfer.cli", "build", "--model", TINY, "--quant", "bf16", "--gpu",
                             "cpu", "--iterations", "1", "--runs-dir", str(runs)], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(tmp_path), preexec_fn=_default_sigint)
    _interrupt_when(proc, lambda: any(cache.glob(".*tmp*/model-*.tmp.safetensors")))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "removed the partial checkpoint" in err
    assert not any(cache.glob(".*")) and not any(cache.glob("*"))  # no hidden temporary folder, no half checkpoint
    (run,) = runs.iterdir()
    st = json.loads((run / "run.json").read_text())
    cmd = f"metainfer build --resume {run.name} --runs-dir {runs}"
    assert st["status"] == "interrupted" and cmd in st["stop_reason"] and st["resume_command"] == cmd
    assert f"continue with: {cmd}" in err
    assert not any((tmp_path / "tmpdir").iterdir())


def test_ctrl_c_during_a_gate_kills_it_and_removes_the_temporary_export(tmp_path, tiny_checkpoint):
    repo = _project(tmp_path / "repo")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "metainfer.cli", "build", "--model", TINY, "--quant", "bf16", "--gpu",
                             "cpu", "--iterations", "1", "--runs-dir", str(runs), "--checkpoint", str(tiny_checkpoint("bf16"))],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(tmp_path), preexec_fn=_default_sigint)
    exports = tmp_path / "tmpdir"

    def gate_running() -> bool:
        f = next(runs.glob("*/run.json"), None) if runs.is_dir() else None
        try:
            flight = json.loads(f.read_text()).get("in_flight") or {} if f else {}
        except ValueError:
            return False
        # the gate's workers have their engine copies: the folder a killed gate cannot remove itself
        return bool(flight.get("gate_pid")) and any(exports.glob("metainfer-best-*")) and any(exports.glob("metainfer-workers-*/*"))

    _interrupt_when(proc, gate_running)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    (run,) = runs.iterdir()
    st = json.loads((run / "run.json").read_text())
    gate_pid = st["in_flight"]["gate_pid"]
    assert st["status"] == "interrupted" and f"metainfer build --resume {run.name} --runs-dir {runs}" in st["stop_reason"]
    assert not any(exports.glob("metainfer-*")), list(exports.iterdir())  # the export, bytecode and worker folders
    stat = Path(f"/proc/{gate_pid}/stat")

    def gone() -> bool:
        try:
            return stat.read_text().split()[2] == "Z"
        except OSError:
            return True

    deadline = time.monotonic() + 5.0  # killed and reaped by the loop, or (parent-death signal) still exiting
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()  # the gate died with the loop
    page = (run / "summary.html").read_text()
    assert "interrupted" in page and f"metainfer build --resume {run.name}" in page
    assert 'id="in-flight"' in page and "iteration 0 was in flight" in page


def test_version():
    p = _cli("--version")
    assert p.returncode == 0 and p.stdout.startswith("metainfer 0.1.0"), p.stdout + p.stderr


def test_generate_prints_tokens_and_timings(tmp_path, tiny_checkpoint):
    ck = tiny_checkpoint("bf16")
    assert _cli("render", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--out", str(tmp_path / "gen")).returncode == 0
    eng = tmp_path / "gen" / f"{TINY}-bf16-cpu"
    p = _cli("generate", "--engine", str(eng), "--checkpoint", str(ck), "--ids", "1,2,3", "--ids", "7,8", "--max-tokens", "4")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    outs = [json.loads(ln.split("-> ")[1]) for ln in lines if ln.startswith("prompt ")]
    assert len(outs) == 2 and all(len(o) == 4 and all(isinstance(t, int) and 0 <= t for t in o) for o in outs)
    assert "first token" in lines[-1] and "tok/s overall" in lines[-1] and "load" in lines[-1]
    assert "decode " in lines[-1]  # a rate, or why there is none (a 4-token run can be shorter than the first-token call)
    bare = tmp_path / "no-tokenizer"
    bare.mkdir()
    for f in ck.iterdir():  # the same checkpoint without its tokenizer files
        if "token" not in f.name and f.name not in ("special_tokens_map.json", "vocab.json", "merges.txt"):
            (bare / f.name).symlink_to(f)
    bad = _cli("generate", "--engine", str(eng), "--checkpoint", str(bare), "--text", "hello")
    assert bad.returncode == 2 and "no tokenizer" in bad.stderr and "--ids" in bad.stderr
    if (ck / "tokenizer.json").is_file():  # synthetic checkpoints carry one once `metainfer serve` lands
        p = _cli("generate", "--engine", str(eng), "--checkpoint", str(ck), "--text", "hello", "--max-tokens", "2")
        assert p.returncode == 0 and "  text: " in p.stdout, p.stderr
    bad = _cli("generate", "--engine", str(eng), "--checkpoint", str(ck), "--ids", "1,x")
    assert bad.returncode == 2 and "comma-separated token ids" in bad.stderr


def test_clean_lists_then_removes_what_metainfer_made(tmp_path):
    repo = _project(tmp_path / "repo")
    env = _env(tmp_path)
    ck = repo / ".metainfer" / "checkpoints" / "m-bf16-seed0"
    ck.mkdir(parents=True)
    (ck / "model-00001-of-00001.safetensors").write_bytes(b"x" * 1000)
    from metainfer.tempdirs import prefix

    tmp = Path(env["TMPDIR"])
    stale, fresh = tmp / (prefix("best", repo) + "old"), tmp / (prefix("judge-pycache", repo) + "new")
    report = tmp / (prefix("report", repo) + "run-x")  # a report copy is done when made: removed at any age
    other = tmp / (prefix("best", tmp_path / "another-clone") + "old")  # another clone's run, maybe still going
    for d in (stale, fresh, other, report):
        (d / "generated").mkdir(parents=True)
    for d in (stale, other):
        os.utime(d, (time.time() - 7200, time.time() - 7200))
    keep = tmp / "unrelated"
    keep.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_gate, live_gate = tmp / f"metainfer-workers-{gone.stdout.strip()}", tmp / f"metainfer-workers-{os.getpid()}"
    for d in (dead_gate, live_gate):
        (d / "engine").mkdir(parents=True)
    p = _cli("clean", "--dry-run", cwd=repo, env=env)
    assert f"would remove dead gate's copies {dead_gate}" in p.stdout and str(live_gate) not in p.stdout, p.stdout
    assert p.returncode == 0 and f"would remove checkpoint" in p.stdout and str(stale) in p.stdout, p.stdout
    assert "made in the last hour" in p.stdout and ck.exists() and stale.exists() and str(other) not in p.stdout
    p = _cli("clean", cwd=repo, env=env)
    assert p.returncode == 0 and not ck.exists() and not stale.exists() and fresh.exists() and keep.exists(), p.stdout
    assert other.exists() and not report.exists() and not dead_gate.exists() and live_gate.exists()
    assert (repo / "metainfer").is_dir() and "freed" in p.stdout


def test_dry_run_says_an_interrupted_candidate_blocks_a_new_run(tmp_path):
    repo = _project(tmp_path / "repo")
    target = f"{TINY}-bf16-cpu"
    wt = repo / ".metainfer" / "worktrees" / target
    wt.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=wt, check=True)
    (wt / "candidate.py").write_text("x = 1\n")  # an interrupted run's candidate, never gated
    run = repo / "runs" / f"20261203-080000-{target}"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": "interrupted"}))
    p = _cli("build", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--dry-run", cwd=repo)
    assert p.returncode == 2 and "refused    : the worktree" in p.stdout, (p.stdout, p.stderr)
    assert f"metainfer build --resume {run.name}" in p.stdout and "metainfer step" in p.stdout
    (wt / "candidate.py").unlink()
    clean = _cli("build", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--dry-run", cwd=repo)
    assert clean.returncode == 0 and "refused" not in clean.stdout, clean.stdout


def test_dry_run_estimates_from_earlier_gates_of_the_target(tmp_path):
    runs = tmp_path / "runs"
    for i, secs in enumerate((40.0, 50.0, 900.0)):
        d = runs / f"20260101-00000{i}-{TINY}-bf16-cpu" / "iter-000"
        d.mkdir(parents=True)
        (d / "report.json").write_text(json.dumps({"iteration": 0, "gate": {"seconds": secs, "timed_out": False}}))
    p = _cli("build", "--model", TINY, "--quant", "bf16", "--gpu", "cpu", "--dry-run", "--iterations", "1", "--runs-dir", str(runs))
    assert p.returncode == 0, p.stderr
    assert "~50 s per gate (median of 3 earlier gates of this target" in p.stdout and "whole run ~" in p.stdout, p.stdout


def test_a_missing_engine_folder_points_at_the_build_worktree(tmp_path):
    """After `metainfer build`, the engine lives in the target's worktree, not in generated/: the error says where."""
    from metainfer.build.config import built_engine_hint

    name = "qwen3.6-35b-a3b-tiny-nvfp4-cpu"
    assert built_engine_hint(Path("generated") / name, tmp_path) == ""
    (tmp_path / ".metainfer/worktrees" / name / "generated" / name / "engine").mkdir(parents=True)
    hint = built_engine_hint(Path("generated") / name, tmp_path)
    assert hint.startswith("; the build's engine of") and hint.endswith(f".metainfer/worktrees/{name}/generated/{name}")
    p = _cli("parity", "--engine", f"generated/{name}", "--checkpoint", str(tmp_path), cwd=tmp_path)
    assert p.returncode == 2 and f".metainfer/worktrees/{name}/generated/{name}" in p.stderr, p.stderr


def test_report_of_a_committed_run_leaves_its_files_unchanged(tmp_path):
    from metainfer.build.records import RunRecord, write_json

    repo = tmp_path / "repo"
    rec = RunRecord.create(repo / "results", "m-nvfp4-cpu", {"agent": "offline", "seed": 0, "branch": "b", "iterations": 1})
    write_json(rec.iter_dir(0) / "report.json", {"iteration": 0, "accepted": True, "summary": "baseline", "reason": "ok",
                                                 "figures": {}, "cumulative_speedup": 1.0})
    (rec.path / "summary.html").write_text("<html>as committed</html>")
    for cmd in (["init", "-q", "-b", "main"], ["config", "user.name", "t"], ["config", "user.email", "t@t"], ["add", "-A"],
                ["commit", "-qm", "a committed run"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    env = _env(tmp_path)
    r = _cli("report", str(rec.path), cwd=repo, env=env)
    assert r.returncode == 0, r.stderr
    from metainfer.tempdirs import prefix

    # repo lacks the project layout, so the copy is named for no clone
    copy = Path(env["TMPDIR"]) / f"{prefix('report', None)}{rec.run_id}" / rec.run_id / "summary.html"
    assert "is committed: the report is written to a copy" in r.stdout and f"html: {copy}" in r.stdout
    assert "<table" in copy.read_text()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo, capture_output=True, text=True)
    assert status.stdout == "" and (rec.path / "summary.html").read_text() == "<html>as committed</html>"
    r = _cli("report", str(rec.path), "--in-place", cwd=repo, env=env)
    assert r.returncode == 0 and "<table" in (rec.path / "summary.html").read_text()


def test_generate_names_a_checkpoint_the_engine_was_not_rendered_for(tmp_path, tiny_checkpoint):
    """An engine rendered for the full-size model refuses the tiny checkpoint in one line, not a traceback."""
    assert _cli("render", "--model", "qwen3.6-35b-a3b", "--quant", "nvfp4", "--gpu", "cpu", "--out", str(tmp_path / "g")).returncode == 0
    eng = tmp_path / "g" / "qwen3.6-35b-a3b-nvfp4-cpu"
    p = _cli("generate", "--engine", str(eng), "--checkpoint", str(tiny_checkpoint("nvfp4")), "--ids", "1,2,3")
    assert p.returncode == 2 and "cannot load" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3, p.stderr

"""What a new user following the README ran into: each refusal comes before anything changes, in one line that names
the problem and the fix (reported 2026-12-04)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = "qwen3.6-35b-a3b-tiny"


def _cli(*args: str, cwd: Path = ROOT, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in (env or os.environ).items() if k != "ANTHROPIC_API_KEY"}
    return subprocess.run([sys.executable, "-m", "metainfer.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _one_line_error(p: subprocess.CompletedProcess) -> str:
    """The error line of a refused command (exit status 2, no traceback, one line)."""
    assert p.returncode == 2 and "Traceback" not in p.stderr, (p.returncode, p.stdout, p.stderr)
    msg = p.stderr.strip()
    assert msg.startswith("error:") and len(msg.splitlines()) == 1, msg
    return msg


def test_a_damaged_run_json_is_named_in_one_line_by_resume_and_report(tmp_path):
    from metainfer.build.records import RunRecord

    runs = tmp_path / "runs"
    rec = RunRecord.create(runs, f"{TINY}-nvfp4-cpu", {"agent": "offline", "seed": 0, "iterations": 1})
    f = rec.path / "run.json"
    f.write_text(f.read_text()[:40])  # truncated
    before = f.read_text()
    for args in (("build", "--resume", rec.run_id, "--runs-dir", str(runs)), ("report", rec.run_id, "--runs-dir", str(runs))):
        msg = _one_line_error(_cli(*args))
        assert str(f) in msg and "not valid JSON" in msg and "restore" in msg and "new build" in msg, msg
    assert f.read_text() == before


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def _project(dest: Path) -> Path:
    """A git repo with the project layout at one commit (``main``)."""
    dest.mkdir(parents=True)
    for d in ("metainfer", "harness", "templates"):
        shutil.copytree(ROOT / d, dest / d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / ".gitignore", dest / ".gitignore")
    for cmd in (["init", "-q", "-b", "main"], ["config", "user.name", "t"], ["config", "user.email", "t@t"], ["add", "-A"],
                ["commit", "-q", "-m", "project"]):
        _git(dest, *cmd)
    return dest


@pytest.mark.parametrize("gc", [False, True])
def test_resume_refuses_a_run_whose_branch_was_deleted(tmp_path, gc):
    """The README's reset (`metainfer clean && git branch -D metainfer/<target>`) then `--resume`: refused before
    anything changes, naming the best engine's commit and how to restore the branch (or that a new build is fresh)."""
    from metainfer.build.config import BuildConfig, BuildError
    from metainfer.build.progress import Progress
    from metainfer.build.records import RunRecord
    from metainfer.build.resume import open_session

    repo = _project(tmp_path / "repo")
    target = f"{TINY}-nvfp4-cpu"
    branch = f"metainfer/{target}"
    _git(repo, "branch", branch)
    _git(repo, "checkout", "-q", branch)
    (repo / "engine.txt").write_text("the run's accepted engine\n")
    _git(repo, "add", "engine.txt")
    _git(repo, "commit", "-q", "-m", "accepted iteration 1")
    best = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    ck = tmp_path / "ck"
    ck.mkdir()
    rec = RunRecord.create(repo / "runs", target, {
        "model": TINY, "quant": "nvfp4", "gpu": "cpu", "agent": "offline", "agent_options": {}, "iterations": 3, "seed": 0,
        "budget": {"time_limit_min": None, "budget_usd": None},
        "gate": {"timeout_s": 60.0, "rounds": 3, "scale": None, "workloads": None, "twin_periods": None},
        "checkpoint": str(ck), "branch": branch, "repo_root": str(repo)})
    rec.state.update({"status": "stopped", "next_iteration": 2, "baseline": {"iteration": 0, "commit": best},
                      "best": {"iteration": 1, "commit": best, "cumulative_speedup": 2.0}})
    rec.save()
    _git(repo, "branch", "-D", branch)
    if gc:  # the commit is gone from git too
        _git(repo, "reflog", "expire", "--expire=now", "--all")
        _git(repo, "gc", "-q", "--prune=now")
    saved = (rec.path / "run.json").read_text()
    cfg = BuildConfig(None, None, None, resume=rec.run_id, runs_dir=repo / "runs", repo_root=repo)
    with pytest.raises(BuildError) as err:
        open_session(cfg, Progress())
    msg = str(err.value)
    assert f"branch {branch} is gone" in msg and best[:10] in msg, msg
    assert f"metainfer build --model {TINY} --quant nvfp4 --gpu cpu" in msg and "fresh run" in msg, msg
    assert ("git no longer has that commit" in msg) == gc and (f"git branch {branch} {best}" in msg) != gc, msg
    # nothing changed: no branch made at main's commit, no worktree, the record as it was
    assert branch not in _git(repo, "branch", "--list", branch)
    assert not (repo / ".metainfer" / "worktrees" / target).exists()
    assert (rec.path / "run.json").read_text() == saved
    if not gc:  # the restore command it gives works
        _git(repo, "branch", branch, best)
        assert _git(repo, "rev-parse", branch) == best


def test_a_second_upgrade_gives_a_way_to_start_again_that_works(tmp_path):
    """The new branch is checked out in its worktree: `git branch -D` alone fails, so the advice removes it first,
    and names the upgrade run to resume."""
    from metainfer.build.records import RunRecord

    repo = _project(tmp_path / "repo")
    old, new = f"{TINY}-nvfp4-cpu", "qwen3.5-35b-a3b-tiny-nvfp4-cpu"
    _git(repo, "checkout", "-q", "-b", f"metainfer/{old}")
    eng = repo / "generated" / old / "engine"
    eng.mkdir(parents=True)
    (eng / "__init__.py").write_text("")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "render")
    _git(repo, "checkout", "-q", "main")
    wt = repo / ".metainfer" / "worktrees" / new
    _git(repo, "worktree", "add", "-q", "-b", f"metainfer/{new}", str(wt), "HEAD")  # the first upgrade's
    rec = RunRecord.create(repo / "runs", new, {"kind": "upgrade", "model": "qwen3.5-35b-a3b-tiny"})
    rec.state["status"] = "interrupted"
    rec.save()
    p = _cli("upgrade", "--target", old, "--to", "qwen3.5-35b-a3b-tiny", cwd=repo)
    msg = _one_line_error(p)
    assert f"metainfer upgrade --resume {rec.run_id}" in msg, msg
    cmd = msg.split("start again from scratch (its commits are lost) with `", 1)[1].split("`", 1)[0]
    assert str(wt) in cmd, msg
    subprocess.run(cmd, shell=True, cwd=repo, check=True, capture_output=True)  # the advice works as given
    assert not _git(repo, "branch", "--list", f"metainfer/{new}") and not wt.exists()


@pytest.mark.parametrize("endpoint, extra, param", [
    ("completions", {"logit_bias": {"5": 100}}, "logit_bias"),
    ("completions", {"response_format": {"type": "json_object"}}, "response_format"),
    ("chat", {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}}, "response_format"),
    ("completions", {"best_of": 3}, "best_of"),
    ("completions", {"suffix": " end"}, "suffix"),
    ("chat", {"tool_choice": "required"}, "tool_choice"),
    ("chat", {"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    ("chat", {"logit_bias": {"5": -100}}, "logit_bias"),
    ("chat", {"frequency_penalty": 0.5}, "frequency_penalty"),
])
def test_the_server_refuses_openai_parameters_it_does_not_implement(endpoint, extra, param):
    """Each is a 400 in the OpenAI shape naming the parameter (as echo=True is), before any work; the no-op values of
    the same parameters pass."""
    from metainfer.serve.protocol import ApiError, ChatCompletionRequest, CompletionRequest, refuse_unsupported

    make = (lambda **kw: CompletionRequest(model=TINY, prompt="hi", **kw)) if endpoint == "completions" else \
        (lambda **kw: ChatCompletionRequest(model=TINY, messages=[{"role": "user", "content": "hi"}], **kw))
    with pytest.raises(ApiError) as err:
        refuse_unsupported(make(**extra))
    e = err.value
    assert e.status == 400 and e.body()["error"]["param"] == param and param in e.message, e.body()
    assert e.body()["error"]["type"] == "invalid_request_error"
    for fine in ({"logit_bias": {}}, {"response_format": {"type": "text"}}, {"frequency_penalty": 0}, {}):
        refuse_unsupported(make(**fine))
    refuse_unsupported(CompletionRequest(model=TINY, prompt="hi", best_of=1, suffix=None))
    for choice in ("auto", "none", None):
        refuse_unsupported(ChatCompletionRequest(model=TINY, messages=[], tool_choice=choice))


def test_serve_md_lists_what_is_not_supported():
    text = (ROOT / "docs" / "SERVE.md").read_text()
    section = text.split("Not supported", 1)[1][:1500]
    for name in ("logit_bias", "response_format", "best_of", "suffix", "tool_choice", "echo"):
        assert f"`{name}" in section, name


def test_a_misspelled_agent_is_refused_by_the_dry_run_as_by_the_run(tmp_path):
    runs = tmp_path / "runs"
    base = ("build", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--agent", "scriptd", "--runs-dir", str(runs))
    real, dry = _one_line_error(_cli(*base)), _one_line_error(_cli(*base, "--dry-run"))
    assert real == dry and "unknown agent 'scriptd'" in real and "scripted" in real, (real, dry)
    assert not runs.exists()


@pytest.mark.parametrize("agent, names", [
    ("anthropic", ("ANTHROPIC_API_KEY", "--agent offline")),
    ("claude-code", ("'claude' is not on PATH", "npm i -g @anthropic-ai/claude-code", "--agent offline")),
])
def test_an_agent_without_its_credentials_is_refused_before_a_run_record(tmp_path, agent, names):
    repo = _project(tmp_path / "repo")  # without the fix the run went on: its branch and worktree land here
    runs = tmp_path / "runs"
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"}  # no `claude` there
    assert not shutil.which("claude", path=env["PATH"])
    base = ("build", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--agent", agent, "--runs-dir", str(runs))
    msg = _one_line_error(_cli(*base, env=env, cwd=repo, timeout=60))
    assert all(n in msg for n in names) and "executable=PATH" not in msg, msg
    assert not runs.exists()  # no run record marked crashed
    dry = _cli(*base, "--dry-run", env=env, cwd=repo)
    assert not (repo / ".metainfer" / "worktrees").exists() and not _git(repo, "branch", "--list", "metainfer/*")
    assert dry.returncode == 2 and "refused    : " in dry.stdout and all(n in dry.stdout for n in names), dry.stdout
    assert not runs.exists()


@pytest.mark.parametrize("port", ["80000", "-1"])
def test_serve_refuses_a_port_out_of_range_in_one_line(tmp_path, port):
    p = _cli("serve", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--checkpoint", str(tmp_path), "--port", port,
             timeout=120)
    msg = _one_line_error(p)
    assert f"--port {port}" in msg and "1-65535" in msg, msg


def test_a_checkpoint_folder_without_config_json_is_named_by_every_command(tmp_path):
    """--checkpoint DIR was passed: the message says DIR has no config.json and what a checkpoint folder holds, not
    "pass --checkpoint DIR"."""
    assert _cli("render", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--out", str(tmp_path / "g")).returncode == 0
    eng = tmp_path / "g" / f"{TINY}-nvfp4-cpu"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a checkpoint\n")
    target = ("--model", TINY, "--quant", "nvfp4", "--gpu", "cpu")
    commands = [
        ("generate", "--engine", str(eng), "--checkpoint", str(empty), "--ids", "1,2,3"),
        ("parity", "--engine", str(eng), "--checkpoint", str(empty)),
        ("bench", "--engine", str(eng), "--checkpoint", str(empty), "--workload", "ttft"),
        ("serve", *target, "--checkpoint", str(empty), "--port", "0"),
        ("build", *target, "--checkpoint", str(empty), "--runs-dir", str(tmp_path / "runs")),
        ("build", *target, "--checkpoint", str(empty), "--runs-dir", str(tmp_path / "runs"), "--dry-run"),
    ]
    for args in commands:
        msg = _one_line_error(_cli(*args, timeout=120))
        assert f"--checkpoint {empty} has no config.json" in msg and "*.safetensors" in msg, (args[0], msg)
        assert "metainfer checkpoint --model M --quant Q --out DIR" in msg and "pass --checkpoint DIR" not in msg, msg
    repo = _project(tmp_path / "repo")  # and for a built target's branch head (the new user's command)
    _git(repo, "checkout", "-q", "-b", f"metainfer/{TINY}-nvfp4-cpu")
    shutil.copytree(eng, repo / "generated" / eng.name)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "render")
    _git(repo, "checkout", "-q", "main")
    msg = _one_line_error(_cli("generate", *target, "--checkpoint", str(empty), "--ids", "1,2,3", cwd=repo))
    assert f"--checkpoint {empty} has no config.json" in msg and "pass --checkpoint DIR" not in msg, msg
    gone = _one_line_error(_cli("parity", "--engine", str(eng), "--checkpoint", str(tmp_path / "nope")))
    assert f"--checkpoint {tmp_path / 'nope'} does not exist" in gone, gone
    assert not (tmp_path / "runs").exists()


def test_readme_counts_the_mutants_the_tool_runs():
    import re

    from metainfer.mutants.catalogue import catalogue

    line = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("metainfer mutants "))
    assert int(re.search(r"# (\d+) single-op mutants", line).group(1)) == len(catalogue(300)), line


@pytest.mark.parametrize("text, why", [
    ("Route each token to one expert fewer.\nThen commit it.\n", "it holds no diff"),
    ("diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n garbage\n", "corrupt patch"),
])
def test_a_script_that_is_not_a_patch_is_refused_before_anything_runs(tmp_path, text, why):
    repo = _project(tmp_path / "repo")  # a run that went ahead would make its branch and worktree here
    runs = tmp_path / "runs"
    notes = tmp_path / "notes.patch"
    notes.write_text(text)
    base = ("build", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--script", str(notes), "--runs-dir", str(runs))
    for extra in (("--dry-run",), ()):  # the plan refuses what the run would
        msg = _one_line_error(_cli(*base, *extra, cwd=repo, timeout=60))
        assert f"--script {notes} is not a patch" in msg and why in msg and "--allow-empty" not in msg, (extra, msg)
        assert not runs.exists() and not _git(repo, "branch", "--list", "metainfer/*")


def test_the_examples_patches_pass_the_patch_check():
    from metainfer.agents.scripted import check_patch, expand_patches

    for p in expand_patches([ROOT / "examples" / "cpu-tiny"]):
        check_patch(p)

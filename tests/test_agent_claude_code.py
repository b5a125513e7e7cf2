"""The ``claude-code`` agent against a stand-in ``claude`` executable put first on PATH.

Each test checks what ends up in the engine folder and the worktree, the record dir
(transcript.json, rendered prompts) and the cost figures, and the flags the CLI was given.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from fakes.engine_fixture import make_worktree
from metainfer.agents import AgentError, BudgetExceeded, get_agent

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def cli(monkeypatch, tmp_path):
    """Put the stand-in first on PATH; returns a function setting its mode, giving the path of its log."""
    assert os.access(FAKES / "claude", os.X_OK), "tests/fakes/claude must be executable"
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "claude-log.json"
    monkeypatch.setenv("FAKE_CLAUDE_LOG", str(log))

    def mode(name: str) -> Path:
        monkeypatch.setenv("FAKE_CLAUDE_MODE", name)
        return log

    return mode


def moe(ctx) -> str:
    return (ctx.engine_dir / "engine" / "moe.py").read_text()


def test_edit_is_captured_with_cost_and_flags(tmp_path, cli):
    log = cli("edit")
    ctx = make_worktree(tmp_path)
    ctx.budget_usd_left = 2.5
    p = get_agent("claude-code", model="claude-opus-4-8", max_turns=12, max_usd=5.0, checkpoint=tmp_path).propose(ctx)

    assert moe(ctx).startswith("BLOCK_N = 128\n") and p.changed
    assert p.summary == "BLOCK_N 64->128 in the MoE matmul" and p.expected_gain == "decode-bs1 +10%"
    assert p.cost_usd == pytest.approx(0.0421)
    assert p.tokens == {"input": 1200, "output": 800, "cache_write": 9000, "cache_read": 30000}

    seen = json.loads(log.read_text())
    argv = seen["argv"]
    assert Path(seen["cwd"]).resolve() == ctx.engine_dir.resolve()
    assert argv[:3] == ["-p", "--output-format", "json"]
    flag = lambda f: argv[argv.index(f) + 1]  # noqa: E731
    assert flag("--permission-mode") == "dontAsk" and flag("--model") == "claude-opus-4-8"
    assert flag("--max-turns") == "12" and flag("--max-budget-usd") == "2.5000"  # the run's budget binds
    allowed = argv[argv.index("--allowedTools") + 1: argv.index("--disallowedTools")]
    assert "Edit(./**)" in allowed and "Write(./**)" in allowed and "Bash" not in allowed
    assert all(a.startswith(("Read(", "Edit(", "Write(", "Glob", "Grep", "Bash(")) for a in allowed)
    assert sum(a.startswith("Bash(") and "metainfer.agents.gate_tools" in a for a in allowed) == 2
    assert "--add-dir" not in argv
    system = flag("--append-system-prompt")
    assert "Edit only the engine folder" in system and "E2M1" in system and "Expected gain:" in system
    assert "# Iteration 1" in seen["prompt"] and "gate_tools parity" in seen["prompt"]
    tools_ctx = json.loads(Path(seen["env_tools_ctx"]).read_text())
    assert tools_ctx["checkpoint"] == str(tmp_path) and tools_ctx["gpu"] == "cpu"

    t = json.loads((ctx.record_dir / "transcript.json").read_text())
    assert t["exit_code"] == 0 and t["result"]["session_id"] and t["changed_files"] == ["engine/moe.py"]
    assert t["outside_changes"] == [] and "<system.md + knowledge.md>" in t["argv"]
    assert all((ctx.record_dir / f).is_file() for f in ("system.md", "knowledge.md", "brief.md"))


def test_write_outside_the_engine_is_an_agent_error_naming_the_path(tmp_path, cli):
    cli("outside")
    ctx = make_worktree(tmp_path)
    with pytest.raises(AgentError, match=r"outside the engine folder: harness/gate\.py") as err:
        get_agent("claude-code").propose(ctx)
    assert not isinstance(err.value, BudgetExceeded) and err.value.cost_usd == pytest.approx(0.0421)
    assert err.value.transcript["outside_changes"] == ["harness/gate.py"]
    t = json.loads((ctx.record_dir / "transcript.json").read_text())
    assert t["outside_changes"] == ["harness/gate.py"] and t["changed_files"] == ["engine/moe.py"]


@pytest.mark.parametrize("mode,match", [("crash", r"no JSON result \(exit status 1\).*unexpected token"),
                                        ("nojson", r"no JSON result \(exit status 0\)"),
                                        ("error", r"failed \(exit status 1, error_during_execution\).*API Error: 500")])
def test_crashed_or_silent_cli_is_an_agent_error(tmp_path, cli, mode, match):
    cli(mode)
    ctx = make_worktree(tmp_path)
    with pytest.raises(AgentError, match=match) as err:
        get_agent("claude-code").propose(ctx)
    assert not isinstance(err.value, BudgetExceeded)
    assert moe(ctx).startswith("BLOCK_N = 64\n")
    assert json.loads((ctx.record_dir / "transcript.json").read_text())["exit_code"] == (0 if mode == "nojson" else 1)


def test_cli_budget_stop_is_budget_exceeded(tmp_path, cli):
    cli("budget")
    with pytest.raises(BudgetExceeded, match="USD limit.*error_max_budget_usd") as err:
        get_agent("claude-code", max_usd=0.5).propose(make_worktree(tmp_path))
    assert err.value.cost_usd == pytest.approx(0.51)


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().split(")")[-1].split()[0] == "Z"


@pytest.mark.parametrize("run_deadline", [False, True])
def test_hang_is_killed_with_its_process_group(tmp_path, cli, monkeypatch, run_deadline):
    cli("hang")
    pidfile = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_CLAUDE_PIDFILE", str(pidfile))
    ctx = make_worktree(tmp_path)
    if run_deadline:
        ctx.deadline = time.time() + 2.0
    started = time.time()
    with pytest.raises(AgentError, match="time limit .* killed") as err:
        get_agent("claude-code", time_limit_s=30.0 if run_deadline else 2.0).propose(ctx)
    assert isinstance(err.value, BudgetExceeded) == run_deadline
    assert time.time() - started < 15
    child = int(pidfile.read_text())
    deadline = time.time() + 5
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.05)
    assert _gone(child), "the CLI's child process survived the kill"
    assert json.loads((ctx.record_dir / "transcript.json").read_text())["timed_out"] is True


def test_spent_run_budget_stops_before_starting(tmp_path, cli):
    log = cli("edit")
    ctx = make_worktree(tmp_path)
    ctx.budget_usd_left = 0.0
    with pytest.raises(BudgetExceeded, match="no USD left"):
        get_agent("claude-code").propose(ctx)
    assert not log.exists() and moe(ctx).startswith("BLOCK_N = 64\n")


def test_missing_cli_is_a_clear_error(monkeypatch, tmp_path):
    import metainfer.agents.claude_code  # noqa: F401  (imports gitpython, which needs git on PATH, before PATH is emptied)

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AgentError, match="is not on PATH; install it.*on PATH, or use --agent offline") as err:
        get_agent("claude-code")
    assert "executable=PATH" not in str(err.value)  # not an option of `metainfer build`


def test_gate_tool_failures_are_tool_errors_and_settings_round_trip(tmp_path, monkeypatch, capsys):
    import sys

    from metainfer.agents.gate_tools import CTX_ENV, GateTools, main
    from metainfer.agents.tools import ToolError

    ctx = make_worktree(tmp_path)
    with pytest.raises(ToolError, match="no checkpoint is configured"):
        GateTools(ctx.worktree, ctx.engine_dir, None, "cpu").parity()
    crash = GateTools(ctx.worktree, ctx.engine_dir, tmp_path, "cpu", out_dir=tmp_path / "g",
                      cmd=[sys.executable, "-c", "import sys; print('boom in the gate'); sys.exit(3)"])
    with pytest.raises(ToolError, match=r"(?s)crashed \(exit status 3\).*boom in the gate"):
        crash.parity()
    slow = GateTools(ctx.worktree, ctx.engine_dir, tmp_path, "cpu", out_dir=tmp_path / "g", timeout_s=30.0,
                     cmd=[sys.executable, "-c", "import time; time.sleep(60)"], time_left=lambda: 0.5)
    started = time.time()
    with pytest.raises(ToolError, match="ran past 1 s and was killed"):
        slow.parity()
    assert time.time() - started < 10
    path = crash.write_ctx(tmp_path / "ctx.json")
    back = GateTools.from_ctx(path)
    assert (back.worktree, back.checkpoint, back.cmd, back.workloads) == (crash.worktree, tmp_path, crash.cmd, "decode-bs1")
    monkeypatch.setenv(CTX_ENV, str(path))
    assert main(["parity"]) == 2 and "crashed (exit status 3)" in capsys.readouterr().err
    assert main(["nonsense"]) == 2
    from metainfer.agents.gate_tools import for_context

    ctx.record_dir.mkdir(parents=True)
    (ctx.record_dir.parent / "run.json").write_text(json.dumps({"checkpoint": "/ck", "repo_root": "/repo"}))
    g = for_context(ctx, None, timeout_s=5.0)
    assert (g.checkpoint, g.judge_dir, g.timeout_s, g.gpu) == (Path("/ck"), Path("/repo"), 5.0, "cpu")
    assert g.out_dir == ctx.record_dir / "agent-gate" and g.seed != ctx.seed
    assert for_context(ctx, tmp_path).checkpoint == tmp_path

"""The ``claude-code`` agent: the Claude Code CLI, headless, working in the engine folder.

One iteration runs ``claude -p --output-format json`` once, with the brief on standard input
and the system prompt plus the knowledge file appended to Claude Code's own system prompt.
It runs with the engine folder as its working directory and with tools limited to it; it is
stopped (its whole process group) at the time limit; its JSON result (result text,
``total_cost_usd``, ``usage``, ``session_id``) becomes the ``Proposal`` and, with the command
line and the tail of its stderr, ``transcript.json`` in the record dir. Afterwards the agent
checks that nothing in the worktree outside the engine folder changed (the build loop checks
too) and raises ``AgentError`` naming the paths if something did.

Flags, from the Claude Code CLI reference (docs.anthropic.com/en/docs/claude-code/cli-reference)
and its permissions page, as read on 2026-11-30:
- ``-p``/``--print`` runs headless; ``--output-format json`` prints one result object with
  ``type``, ``subtype`` (``success``, ``error_max_turns``, ``error_max_budget_usd``, ...),
  ``is_error``, ``result``, ``session_id``, ``total_cost_usd``, ``usage``, ``num_turns``.
- ``--permission-mode dontAsk`` denies every tool call that no allow rule pre-approves (no
  prompt can be answered headless); ``--allowedTools`` gives the rules: ``Read``/``Edit``/
  ``Write`` limited to ``./**`` (relative to the working directory, the engine folder), ``Glob``,
  ``Grep``, and ``Bash`` for exactly the two gate commands; ``--disallowedTools`` removes web
  access. No ``--add-dir``: no directory beyond the engine folder is granted.
- ``--max-turns``, ``--max-budget-usd`` and ``--model`` bound the session.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from metainfer.agents.base import AgentError, BudgetExceeded, Proposal, ProposalContext
from metainfer.agents.gate_tools import CTX_ENV, for_context, kill_group
from metainfer.agents.limits import Limits
from metainfer.agents.prompts import budget_lines, render_prompts, write_prompts
from metainfer.agents.workspace import changed_paths, snapshot

MODEL_ENV = "METAINFER_CLAUDE_CODE_MODEL"
_BUDGET_SUBTYPES = {"error_max_budget_usd": "USD", "error_max_turns": "turn"}


class ClaudeCodeAgent:
    """Claude Code CLI agent; see the module docstring.

    Args:
        model: ``--model`` (else ``$METAINFER_CLAUDE_CODE_MODEL``, else the CLI's default).
        executable: the CLI, a name looked up on PATH or a path.
        max_turns, max_usd, time_limit_s: per-iteration limits (``--max-turns``, ``--max-budget-usd``,
            and the wall time after which the process group is killed); None = none.
        permission_mode: ``--permission-mode``.
        checkpoint: checkpoint folder for the gate commands the session may run.
        gate_timeout_s, bench_rounds: settings of those gate commands.
        extra_args: more CLI arguments, appended as given.

    Raises:
        AgentError: the executable is not found (install Claude Code and put it on PATH).
    """

    name = "claude-code"

    def __init__(self, model: str | None = None, executable: str = "claude", *, max_turns: int | None = 60,
                 max_usd: float | None = 10.0, time_limit_s: float | None = 3600.0, permission_mode: str = "dontAsk",
                 checkpoint: str | Path | None = None, gate_timeout_s: float = 1800.0, bench_rounds: int = 2,
                 extra_args: list[str] | tuple[str, ...] = ()) -> None:
        self.model = model or os.environ.get(MODEL_ENV) or None
        found = shutil.which(executable)
        if not found:
            from metainfer.agents import claude_missing_message

            raise AgentError(claude_missing_message(executable))
        self.executable = found
        self.limits = Limits(max_turns=max_turns, max_tokens=None, max_usd=max_usd, time_limit_s=time_limit_s)
        self.permission_mode = permission_mode
        self.checkpoint = Path(checkpoint) if checkpoint else None
        self.gate_opts = {"timeout_s": gate_timeout_s, "rounds": bench_rounds}
        self.extra_args = list(extra_args)

    def propose(self, ctx: ProposalContext) -> Proposal:
        """Run the CLI once on ``ctx.engine_dir``; see the module docstring.

        Raises:
            AgentError: the CLI exited non-zero, printed no JSON, reported an error, ran past the
                per-iteration time limit (killed), or changed files outside the engine folder.
            BudgetExceeded: the run's USD or time was already spent, the CLI stopped at its USD or
                turn limit, or the run's deadline killed it.
            Both carry ``.cost_usd``, ``.tokens`` and ``.transcript`` where the CLI ran.
        """
        usd = min([c for c in (self.limits.max_usd, ctx.budget_usd_left) if c is not None], default=None)
        if usd is not None and usd <= 0:
            raise BudgetExceeded("no USD left for this run; the run stops here")
        ends = [e for e in (ctx.deadline, time.time() + self.limits.time_limit_s if self.limits.time_limit_s else None) if e]
        time_left = min(ends) - time.time() if ends else None
        if time_left is not None and time_left <= 0:
            raise BudgetExceeded("no time left for this run; the run stops here")
        run_deadline_binds = ctx.deadline is not None and (self.limits.time_limit_s is None or ctx.deadline <= min(ends))

        ctx.record_dir.mkdir(parents=True, exist_ok=True)
        gate = for_context(ctx, self.checkpoint, **self.gate_opts)
        tools_ctx = gate.write_ctx(ctx.record_dir / "tools_ctx.json")
        cmds = {k: f"{sys.executable} -m metainfer.agents.gate_tools {k}" for k in ("parity", "bench")}
        prompts = render_prompts(ctx, loop_tools=False, gate_tools=False, cli_tools=cmds, budget=budget_lines(
            ctx, max_usd=self.limits.max_usd, max_turns=self.limits.max_turns, time_limit_s=self.limits.time_limit_s))
        write_prompts(prompts, ctx.record_dir)

        argv = self._argv(prompts.system + "\n\n# Knowledge\n\n" + prompts.knowledge, usd, cmds)
        env = {**os.environ, CTX_ENV: str(tools_ctx)}
        excluded = (ctx.engine_dir, ctx.record_dir)
        outside_before, engine_before = snapshot(ctx.worktree, exclude=excluded), snapshot(ctx.engine_dir)
        t: dict[str, Any] = {"agent": self.name, "argv": [a if len(a) < 500 else "<system.md + knowledge.md>" for a in argv],
                             "cwd": str(ctx.engine_dir), "prompts": ["system.md", "knowledge.md", "brief.md"]}
        started = time.time()
        proc = subprocess.Popen(argv, cwd=ctx.engine_dir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(prompts.brief, timeout=time_left)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
            out, err = proc.communicate()
        data = _parse(out)
        t.update(exit_code=proc.returncode, seconds=round(time.time() - started, 3), timed_out=timed_out,
                 result=data, stdout_tail=None if data else out[-2000:], stderr_tail=err[-4000:],
                 changed_files=changed_paths(engine_before, snapshot(ctx.engine_dir)),
                 outside_changes=changed_paths(outside_before, snapshot(ctx.worktree, exclude=excluded)))
        (ctx.record_dir / "transcript.json").write_text(json.dumps(t, indent=1, default=str))
        cost = float((data or {}).get("total_cost_usd") or 0.0)
        tokens = _tokens((data or {}).get("usage") or {})
        self._check(t, data, timed_out, time_left, run_deadline_binds, cost, tokens)
        result = str(data.get("result") or "")
        hypothesis, expected = _stated(result)
        summary = next((ln.strip() for ln in result.splitlines() if ln.strip()), "") or hypothesis or "no summary given"
        return Proposal(summary=summary[:300], expected_gain=expected, transcript=t, cost_usd=cost, tokens=tokens,
                        changed=bool(t["changed_files"]))

    def _argv(self, system: str, usd: float | None, cmds: dict[str, str]) -> list[str]:
        allowed = ["Read(./**)", "Edit(./**)", "Write(./**)", "Glob", "Grep", *(f"Bash({c})" for c in cmds.values())]
        argv = [self.executable, "-p", "--output-format", "json", "--permission-mode", self.permission_mode,
                "--allowedTools", *allowed, "--disallowedTools", "WebFetch", "WebSearch",
                "--append-system-prompt", system]
        if self.model:
            argv += ["--model", self.model]
        if self.limits.max_turns:
            argv += ["--max-turns", str(self.limits.max_turns)]
        if usd is not None:
            argv += ["--max-budget-usd", f"{usd:.4f}"]
        return argv + self.extra_args

    def _check(self, t: dict[str, Any], data: dict[str, Any] | None, timed_out: bool, time_left: float | None,
               run_deadline_binds: bool, cost: float, tokens: dict[str, int]) -> None:
        """Raise the error this run deserves, with the spend attached; return when it succeeded."""
        def fail(cls: type[AgentError], msg: str) -> None:
            e = cls(msg)
            e.cost_usd, e.tokens, e.transcript = cost, tokens, t  # type: ignore[attr-defined]
            raise e

        if t["outside_changes"]:
            fail(AgentError, f"claude-code changed files outside the engine folder: {', '.join(t['outside_changes'])}")
        if timed_out:
            fail(BudgetExceeded if run_deadline_binds else AgentError,
                 f"claude-code ran past its time limit ({time_left:.0f} s) and was killed with its process group")
        subtype = (data or {}).get("subtype")
        if subtype in _BUDGET_SUBTYPES:
            fail(BudgetExceeded, f"claude-code stopped at its {_BUDGET_SUBTYPES[subtype]} limit ({subtype}); spent ${cost:.4f}")
        if data is None:
            fail(AgentError, f"claude-code printed no JSON result (exit status {t['exit_code']}); stderr ends with: "
                             f"{t['stderr_tail'][-500:] or '(nothing)'}")
        if t["exit_code"] != 0 or data.get("is_error"):
            fail(AgentError, f"claude-code failed (exit status {t['exit_code']}, {subtype or 'no subtype'}): "
                             f"{str(data.get('result') or t['stderr_tail'])[-500:]}")


def _parse(stdout: str) -> dict[str, Any] | None:
    """The result object of ``--output-format json``: the whole stdout, else its last line that is a JSON object."""
    for text in (stdout, *reversed(stdout.strip().splitlines())):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict):
            return data
    return None


def _tokens(usage: dict[str, Any]) -> dict[str, int]:
    """The CLI's ``usage`` (Messages API names) as our token kinds."""
    return {"input": int(usage.get("input_tokens") or 0), "output": int(usage.get("output_tokens") or 0),
            "cache_write": int(usage.get("cache_creation_input_tokens") or 0),
            "cache_read": int(usage.get("cache_read_input_tokens") or 0)}


def _stated(text: str) -> tuple[str, str]:
    """The ``Hypothesis:`` and ``Expected gain:`` lines of the final answer (empty strings when absent)."""
    found = {"hypothesis": "", "expected gain": ""}
    for line in text.splitlines():
        key, _, value = line.strip().lstrip("-* ").partition(":")
        key = key.strip().strip("*").lower().replace("_", " ")
        if key in found and not found[key]:
            found[key] = value.strip()
    return found["hypothesis"], found["expected gain"]

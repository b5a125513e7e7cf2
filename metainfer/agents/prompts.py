"""Render the agent's prompts from ``prompts/`` (jinja2) for one iteration, and record them.

Three texts per iteration:
- ``system``: role, target and rules (``prompts/system.md.j2``); the same for every iteration
  of a run, so the API agent marks it for prompt caching.
- ``knowledge``: facts of the model family (``prompts/knowledge/<family>.md``), plain text.
- ``brief``: this iteration's situation (``prompts/brief.md.j2``): target facts, the engine's
  file map (its ``ENGINE.md`` and a listing), the best gate result with its worst parity layer,
  benchmark figures with roofline fraction and a per-kernel profile when the gate JSON has
  one, the history of attempts with why each was rejected, and the budget left.

``write_prompts`` puts ``system.md``, ``knowledge.md`` and ``brief.md`` into the iteration's
record dir (``ctx.record_dir``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from metainfer import REPO_ROOT
from metainfer.agents.base import ProposalContext
from metainfer.agents.gate_tools import summarize_gate
from metainfer.agents.tools import list_files

PROMPTS_DIR = REPO_ROOT / "prompts"


@dataclass(frozen=True)
class RenderedPrompts:
    """The three prompt texts of one iteration (markdown strings)."""

    system: str
    knowledge: str
    brief: str


def _cell(value: Any) -> str:
    """A value as one markdown table cell: no newlines, no bare pipes, at most 200 characters."""
    text = "" if value is None else str(value)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= 200 else text[:197] + "..."


def _fig(value: Any) -> str:
    """A measured figure with 4 significant digits (``0.5487``, ``2.686e-05``); other values as they are."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _env(prompts_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(prompts_dir)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, autoescape=False, trim_blocks=False)
    env.filters["cell"] = _cell
    env.filters["fig"] = _fig
    return env


def budget_lines(ctx: ProposalContext, *, max_usd: float | None = None, max_turns: int | None = None,
                 time_limit_s: float | None = None) -> list[str]:
    """Human lines stating what this iteration may still spend (USD, turns, minutes)."""
    lines = []
    usd = [c for c in (max_usd, ctx.budget_usd_left) if c is not None]
    if usd:
        lines.append(f"USD: at most ${min(usd):.2f} this iteration")
    if max_turns:
        lines.append(f"turns: at most {max_turns} model calls")
    ends = [e for e in (ctx.deadline, time.time() + time_limit_s if time_limit_s else None) if e]
    if ends:
        lines.append(f"time: about {max(0.0, min(ends) - time.time()) / 60:.0f} minutes, gate runs included")
    return lines or ["no explicit limit; be economical all the same"]


def _history_rows(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for h in history:
        objective = h.get("objective") if isinstance(h.get("objective"), dict) else {}
        rows.append({"iteration": h.get("iteration", "?"), "accepted": bool(h.get("accepted")),
                     "summary": h.get("summary", ""), "expected_gain": h.get("expected_gain", ""),
                     "speedup": h.get("speedup", objective.get("speedup", "")), "reason": h.get("reason", "")})
    return rows


def brief_context(ctx: ProposalContext, budget: list[str], cli_tools: dict[str, str] | None = None) -> dict[str, Any]:
    """The variables of ``brief.md.j2`` for ``ctx`` (see the module docstring)."""
    from metainfer.render import render_context  # the engine renderer's facts: one source for dims

    facts = render_context(ctx.target)
    kinds = facts["layer_types"]
    engine_md = ctx.engine_dir / "ENGINE.md"
    return {
        "iteration": ctx.iteration,
        "target": {"name": ctx.target.name, "model": facts["model"], "family": facts["family"],
                   "quant": facts["quant"], "gpu": facts["gpu"]},
        "dims": facts["dims"],
        "layer_counts": {k: kinds.count(k) for k in ("linear_attention", "full_attention")},
        "gpu": facts["gpu_profile"],
        "engine_md": engine_md.read_text().strip() if engine_md.is_file() else "",
        "listing": list_files(ctx.engine_dir) if ctx.engine_dir.is_dir() else "(engine folder missing)",
        "best": summarize_gate(ctx.best),
        "history": _history_rows(ctx.history),
        "budget": budget,
        "cli_tools": cli_tools,
    }


def render_prompts(ctx: ProposalContext, *, budget: list[str], loop_tools: bool, gate_tools: bool,
                   cli_tools: dict[str, str] | None = None, prompts_dir: Path = PROMPTS_DIR) -> RenderedPrompts:
    """Render the system prompt, knowledge and brief for ``ctx``.

    Args:
        budget: lines from ``budget_lines``.
        loop_tools: the agent has ``propose``/``finish`` tools (API agent) rather than stating
            its hypothesis in text (CLI agent).
        gate_tools: ``run_parity``/``run_quick_bench`` tools exist.
        cli_tools: shell commands for parity and bench (CLI agent), or None.

    Raises:
        FileNotFoundError: no knowledge file for the model's family (write
            ``prompts/knowledge/<family>.md``).
        jinja2.UndefinedError: a template asks for a variable the context lacks (a template bug).
    """
    env = _env(prompts_dir)
    family = ctx.target.model.family
    knowledge = prompts_dir / "knowledge" / f"{family}.md"
    if not knowledge.is_file():
        raise FileNotFoundError(f"no knowledge file for model family {family!r}: write {knowledge}")
    target = {"name": ctx.target.name, "model": ctx.target.model.name, "quant": ctx.target.quant.name,
              "gpu": ctx.target.gpu.name}
    system = env.get_template("system.md.j2").render(target=target, loop_tools=loop_tools, gate_tools=gate_tools,
                                                     budget=budget)
    brief = env.get_template("brief.md.j2").render(**brief_context(ctx, budget, cli_tools))
    return RenderedPrompts(system=system, knowledge=knowledge.read_text(), brief=brief)


def write_prompts(prompts: RenderedPrompts, record_dir: Path) -> list[Path]:
    """Write ``system.md``, ``knowledge.md`` and ``brief.md`` into ``record_dir`` (made if missing); returns the paths."""
    record_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in ("system", "knowledge", "brief"):
        p = record_dir / f"{name}.md"
        p.write_text(getattr(prompts, name))
        paths.append(p)
    return paths

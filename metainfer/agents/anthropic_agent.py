"""The ``anthropic`` agent: a Messages API tool-use loop that edits the engine folder.

One iteration: render the prompts (``metainfer.agents.prompts``) into the record dir, then
loop query → act: call the model with the system prompt and the knowledge block (both
marked for prompt caching, plus a rolling cache mark on the newest message), run each
``tool_use`` with the confined tools (``metainfer.agents.tools``), and send the results
back. A malformed or refused call is answered with an ``is_error`` tool result and the
loop goes on. The iteration ends when the model calls ``finish`` or answers without a tool
call (its text is the summary). Edits are refused until the model has called ``propose``
with its hypothesis and expected gain. Limits (``metainfer.agents.limits``) raise
``BudgetExceeded``; ``transcript.json`` (messages, retries, tokens, cost) is written to the
record dir after every turn and at the end, whatever happened.

Configuration: ``model`` (else ``$METAINFER_ANTHROPIC_MODEL``, else ``DEFAULT_MODEL``),
``base_url`` (else ``$ANTHROPIC_BASE_URL``, else the SDK's default), ``api_key`` (else
``$ANTHROPIC_API_KEY``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import anthropic

from metainfer.agents.anthropic_api import RetryPolicy, create_with_retries, usage_tokens
from metainfer.agents.base import AgentError, Proposal, ProposalContext
from metainfer.agents.gate_tools import for_context
from metainfer.agents.limits import Limits, Meter, price_for
from metainfer.agents.prompts import budget_lines, render_prompts, write_prompts
from metainfer.agents.tools import LOOP_TOOL_SPECS, ToolBox, ToolError, check_input
from metainfer.agents.workspace import changed_paths, snapshot
from metainfer.errors import MetainferError

DEFAULT_MODEL = "claude-opus-4-8"  # strongest non-deprecated Opus in the SDK 2.14 model list with a verified price
MODEL_ENV = "METAINFER_ANTHROPIC_MODEL"
_CACHE = {"type": "ephemeral"}


class AnthropicAgent:
    """Messages API agent; see the module docstring.

    Args:
        model, base_url, api_key: as in the module docstring.
        max_turns, max_tokens, max_usd, time_limit_s: per-iteration ``Limits`` (None = none).
        max_output_tokens: ``max_tokens`` of each call (cut further by the token limit).
        retries, retry_base_s, retry_cap_s: the ``RetryPolicy`` for 429/529/5xx and connection errors.
        request_timeout_s: HTTP timeout of one call.
        checkpoint: checkpoint folder for ``run_parity``/``run_quick_bench`` (else the tools answer
            with an error); ``gate_timeout_s``, ``bench_rounds``, ``gate_cmd`` tune them.

    Raises:
        MetainferError: no API key (set ANTHROPIC_API_KEY).
        ValueError: a USD limit with a model missing from ``pricing.json``, or a bad limit.
    """

    name = "anthropic"

    def __init__(self, model: str | None = None, base_url: str | None = None, api_key: str | None = None, *,
                 max_turns: int | None = 40, max_tokens: int | None = 3_000_000, max_usd: float | None = 10.0,
                 time_limit_s: float | None = 3600.0, max_output_tokens: int = 16_000, retries: int = 6,
                 retry_base_s: float = 2.0, retry_cap_s: float = 60.0, request_timeout_s: float = 600.0,
                 checkpoint: str | Path | None = None, gate_timeout_s: float = 1800.0, bench_rounds: int = 2,
                 gate_cmd: list[str] | None = None) -> None:
        self.model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise MetainferError("the anthropic agent needs an API key: set ANTHROPIC_API_KEY (or use --agent offline)")
        self.limits = Limits(max_turns, max_tokens, max_usd, time_limit_s)
        self.price = price_for(self.model)
        Meter(self.limits, self.price, model=self.model)  # refuses a USD limit on an unpriced model now, not mid-run
        self.max_output_tokens = max_output_tokens
        self.retry = RetryPolicy(retries, retry_base_s, retry_cap_s)
        self.checkpoint = Path(checkpoint) if checkpoint else None
        self.gate_opts = {"timeout_s": gate_timeout_s, "rounds": bench_rounds, **({"cmd": gate_cmd} if gate_cmd else {})}
        self.client = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=0, timeout=request_timeout_s)

    def propose(self, ctx: ProposalContext) -> Proposal:
        """Run one iteration's tool-use loop on ``ctx.engine_dir``; see the module docstring.

        Raises:
            BudgetExceeded: turns, tokens, USD or time ran out.
            AgentError: the API refused the request or kept failing past the retries.
            Both carry ``.cost_usd``, ``.tokens`` and ``.transcript`` (what was spent and said so far).
        """
        meter = Meter(self.limits, self.price, ctx.budget_usd_left, ctx.deadline, model=self.model)
        gate = for_context(ctx, self.checkpoint, **self.gate_opts)
        gate.time_left = meter.time_left  # a gate run never outlives the iteration
        box = ToolBox(ctx.engine_dir, gate.as_tools())
        prompts = render_prompts(ctx, loop_tools=True, gate_tools=True, budget=budget_lines(
            ctx, max_usd=self.limits.max_usd, max_turns=self.limits.max_turns, time_limit_s=self.limits.time_limit_s))
        write_prompts(prompts, ctx.record_dir)
        system = [{"type": "text", "text": prompts.system, "cache_control": _CACHE},
                  {"type": "text", "text": "# Knowledge\n\n" + prompts.knowledge, "cache_control": _CACHE}]
        tools = box.specs + LOOP_TOOL_SPECS
        before = snapshot(ctx.engine_dir)
        t: dict[str, Any] = {"agent": self.name, "model": self.model, "base_url": self.base_url or "default",
                             "iteration": ctx.iteration, "prompts": ["system.md", "knowledge.md", "brief.md"],
                             "messages": [{"role": "user", "content": prompts.brief}], "events": [],
                             "hypothesis": "", "expected_gain": "", "summary": "", "end": "running", "error": None}
        try:
            while t["end"] == "running":
                meter.before_turn()
                request = {"model": self.model, "max_tokens": meter.output_cap(self.max_output_tokens),
                           "system": system, "tools": tools, "messages": _with_cache_mark(t["messages"])}
                resp = create_with_retries(self.client, request, self.retry, t["events"], meter.time_left)
                content = [b.model_dump(mode="json", exclude_none=True) for b in resp.content]
                t["messages"].append({"role": "assistant", "content": content})
                t["events"].append({"event": "response", "turn": meter.turns, "stop_reason": resp.stop_reason,
                                    "usage": usage_tokens(resp.usage), "time": time.time()})
                meter.charge(usage_tokens(resp.usage))
                calls = [b for b in content if b["type"] == "tool_use"]
                if not calls:
                    text = "\n".join(b["text"] for b in content if b["type"] == "text").strip()
                    _take_text(t, text)
                    t["end"] = "no_tool_call"
                    break
                t["messages"].append({"role": "user", "content": [self._act(c, box, t) for c in calls]})
                _write_transcript(ctx.record_dir, {**t, "turns": meter.turns, "cost_usd": meter.cost_usd})
        except AgentError as err:  # BudgetExceeded included: book the spend, then let the loop decide
            t["end"], t["error"] = type(err).__name__, str(err)
            err.cost_usd, err.tokens, err.transcript = meter.cost_usd, dict(meter.tokens), t  # type: ignore[attr-defined]
            raise
        finally:
            t.update(turns=meter.turns, tokens=dict(meter.tokens), cost_usd=round(meter.cost_usd, 6),
                     changed_files=changed_paths(before, snapshot(ctx.engine_dir)))
            _write_transcript(ctx.record_dir, t)
        summary = t["summary"] or t["hypothesis"] or "no summary given"
        return Proposal(summary=summary.splitlines()[0][:300], expected_gain=t["expected_gain"], transcript=t,
                        cost_usd=meter.cost_usd, tokens=dict(meter.tokens), changed=bool(t["changed_files"]))

    def _act(self, call: dict[str, Any], box: ToolBox, t: dict[str, Any]) -> dict[str, Any]:
        """Run one ``tool_use`` block; return its ``tool_result`` block (``is_error`` on any refusal)."""
        name, args, started = call["name"], call.get("input"), time.time()
        try:
            if name == "propose":
                args = check_input(LOOP_TOOL_SPECS[0], args)
                if t["hypothesis"]:
                    raise ToolError(f"one hypothesis per iteration: you already proposed {t['hypothesis']!r}; "
                                    "finish this one (a new idea belongs to the next iteration)")
                t["hypothesis"], t["expected_gain"] = args["hypothesis"].strip(), args["expected_gain"].strip()
                out = "noted; make the change now"
            elif name == "finish":
                t["summary"] = check_input(LOOP_TOOL_SPECS[1], args)["summary"].strip()
                t["end"] = "finish"
                out = "iteration ended; the harness gates the engine now"
            else:
                if name in ("write_file", "edit_file") and not t["hypothesis"]:
                    check_input(next(s for s in box.specs if s["name"] == name), args)  # a malformed call hears that first
                    raise ToolError("call propose(hypothesis, expected_gain) before any edit: the expected gain is stated first")
                out = box.call(name, args)
            is_error = False
        except ToolError as err:
            out, is_error = str(err), True
        t["events"].append({"event": "tool", "name": name, "id": call["id"], "is_error": is_error,
                            "seconds": round(time.time() - started, 3)})
        return {"type": "tool_result", "tool_use_id": call["id"], "content": out, "is_error": is_error}


def _take_text(t: dict[str, Any], text: str) -> None:
    """A final answer without tool calls: its first line is the summary; ``Hypothesis:``/``Expected gain:`` lines are taken."""
    for line in text.splitlines():
        key, _, value = line.strip().lstrip("-* ").partition(":")
        if key.strip().lower() == "hypothesis" and not t["hypothesis"]:
            t["hypothesis"] = value.strip()
        elif key.strip().lower() in ("expected gain", "expected_gain") and not t["expected_gain"]:
            t["expected_gain"] = value.strip()
    t["summary"] = t["summary"] or next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _with_cache_mark(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose newest message's last block carries ``cache_control`` (rolling prompt cache)."""
    out = [dict(m) for m in messages]
    last = out[-1]
    blocks = [{"type": "text", "text": last["content"]}] if isinstance(last["content"], str) else [dict(b) for b in last["content"]]
    blocks[-1]["cache_control"] = _CACHE
    last["content"] = blocks
    return out


def _write_transcript(record_dir: Path, t: dict[str, Any]) -> None:
    record_dir.mkdir(parents=True, exist_ok=True)
    tmp = record_dir / "transcript.json.tmp"
    tmp.write_text(json.dumps(t, indent=1, default=str))
    tmp.replace(record_dir / "transcript.json")

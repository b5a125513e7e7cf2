"""Agent registry: ``offline``, ``scripted``, ``anthropic``, ``claude-code``.

Backends are imported lazily so that, for example, the offline agent needs no SDK.
"""

from __future__ import annotations

import importlib
import os
import shutil

from metainfer.agents.base import Agent, AgentError, BudgetExceeded, Proposal, ProposalContext
from metainfer.errors import MetainferError, UnknownNameError

#: name -> "module:Class"
AGENTS: dict[str, str] = {
    "offline": "metainfer.agents.offline:OfflineAgent",
    "scripted": "metainfer.agents.scripted:ScriptedAgent",
    "anthropic": "metainfer.agents.anthropic_agent:AnthropicAgent",
    "claude-code": "metainfer.agents.claude_code:ClaudeCodeAgent",
}


def default_agent_name() -> str:
    """``anthropic`` when ``ANTHROPIC_API_KEY`` is set, else ``offline``."""
    return "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"


def claude_missing_message(executable: str = "claude") -> str:
    """Why the ``claude-code`` agent cannot start without its CLI, and what the user can do."""
    return (f"the claude-code agent needs the Claude Code CLI, and {executable!r} is not on PATH; install it "
            "(npm i -g @anthropic-ai/claude-code) and put the folder holding `claude` on PATH, or use --agent offline")


#: why the ``anthropic`` agent cannot start without a key, and what the user can do
ANTHROPIC_KEY_MESSAGE = "the anthropic agent needs an API key: set ANTHROPIC_API_KEY (or use --agent offline)"


def check_agent(name: str, options: dict | None = None) -> None:
    """Refuse an agent that cannot start, before a run record is written: an unknown name, ``anthropic`` without
    ``ANTHROPIC_API_KEY``, ``claude-code`` without its ``claude`` executable on PATH.

    Raises:
        UnknownNameError: unknown agent name; the message lists the known ones.
        MetainferError: the agent's credentials or executable are missing; the message says how to provide them.
    """
    options = options or {}
    if name not in AGENTS:
        raise UnknownNameError(f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))}")
    if name == "anthropic" and not (options.get("api_key") or os.environ.get("ANTHROPIC_API_KEY")):
        raise MetainferError(ANTHROPIC_KEY_MESSAGE)
    if name == "claude-code" and not shutil.which(options.get("executable") or "claude"):
        raise MetainferError(claude_missing_message(options.get("executable") or "claude"))


def get_agent(name: str, **options) -> Agent:
    """Instantiate the agent registered as ``name`` with backend-specific ``options``.

    Raises:
        UnknownNameError: unknown agent name; the message lists the known ones.
    """
    try:
        module, cls = AGENTS[name].split(":")
    except KeyError:
        raise UnknownNameError(f"unknown agent {name!r}; known agents: {', '.join(sorted(AGENTS))}") from None
    return getattr(importlib.import_module(module), cls)(**options)


__all__ = ["AGENTS", "Agent", "AgentError", "BudgetExceeded", "Proposal", "ProposalContext", "check_agent",
           "default_agent_name", "get_agent"]

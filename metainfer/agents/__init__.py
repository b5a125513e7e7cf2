"""Agent registry: ``offline``, ``scripted``, ``anthropic``, ``claude-code``.

Backends are imported lazily so that, for example, the offline agent needs no SDK.
"""

from __future__ import annotations

import importlib
import os

from metainfer.agents.base import Agent, AgentError, BudgetExceeded, Proposal, ProposalContext
from metainfer.errors import UnknownNameError

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


__all__ = ["AGENTS", "Agent", "AgentError", "BudgetExceeded", "Proposal", "ProposalContext", "default_agent_name", "get_agent"]

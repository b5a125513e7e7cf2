"""The agent interface: one method, ``propose``, that edits the engine in place.

An agent sees the target, the engine folder inside the target's git worktree, the run's
history and the best gate result so far. It edits files under ``ctx.engine_dir`` and
returns a ``Proposal`` saying what it did and what it cost. It never commits: the build
loop gates the edit and commits it only if the gate accepts it. Limits raise the typed
errors below; the loop records them as a rejected iteration, never a lost run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from metainfer.errors import MetainferError
from metainfer.targets import Target


class AgentError(MetainferError):
    """The agent failed this iteration (crash, malformed reply, tool error); the iteration is rejected."""


class BudgetExceeded(AgentError):
    """A USD, token, turn or time limit was reached; the run stops at this iteration boundary."""


@dataclass
class ProposalContext:
    """What an agent gets for one iteration.

    Attributes:
        target: the target being built.
        worktree: root of the target's git worktree (the branch ``target.branch``).
        engine_dir: ``worktree / "generated" / target.name``; the only folder the agent may change.
        iteration: 1-based iteration number.
        history: one dict per earlier iteration of this run (``report.json`` contents:
            iteration, summary, accepted, reason, objective figures).
        best: the gate JSON (schema 1) of the best accepted engine so far.
        record_dir: ``runs/<run-id>/iter-NNN/``; the agent may write its transcript and prompts here.
        seed: the run's seed, for agents that search.
        deadline: ``time.time()`` value by which the agent must return, or None.
        budget_usd_left: USD the agent may still spend in this run, or None for no limit.
    """

    target: Target
    worktree: Path
    engine_dir: Path
    iteration: int
    history: list[dict[str, Any]]
    best: dict[str, Any]
    record_dir: Path
    seed: int = 0
    deadline: float | None = None
    budget_usd_left: float | None = None


@dataclass
class Proposal:
    """What an agent did in one iteration.

    Attributes:
        summary: one line, the hypothesis and the change ("BLOCK_N 64→128 in the W4A16 matmul: fewer
            programs at batch 1").
        expected_gain: what the agent predicted, free text (may be empty).
        transcript: the conversation or log, JSON-serialisable.
        cost_usd: money spent this iteration.
        tokens: token counts by kind (``input``, ``output``, ``cache_read``, ``cache_write``).
        changed: False when the agent made no edit (the loop then skips the gate).
    """

    summary: str
    expected_gain: str = ""
    transcript: Any = field(default_factory=list)
    cost_usd: float = 0.0
    tokens: dict[str, int] = field(default_factory=dict)
    changed: bool = True


class Agent(Protocol):
    """Anything with a ``name`` and a ``propose`` method is an agent."""

    name: str

    def propose(self, ctx: ProposalContext) -> Proposal:
        """Edit the engine under ``ctx.engine_dir`` and say what was done.

        Raises:
            AgentError: this iteration failed; recorded as rejected.
            BudgetExceeded: a limit was reached; the run stops cleanly.
        """
        ...

"""The offline agent (no LLM): a seeded coordinate search over the engine's declared tunables.

It edits only ``engine/tunables.json`` (``{"values": {...}, "space": {name: [choices]}}``,
docs/CONTRACTS.md "The engine"), one value per iteration, and lets the gate judge. It learns
from the run's history (``report.json`` of earlier iterations, which carry the ``tunables``
each candidate had): it replays the history to know the best configuration at each point,
which single changes lost (and in which direction), and never proposes a configuration
already gated. Among the untried neighbours of the best it prefers the nearest choice
(adjacent in the declared list), a direction that won before, and values that lost least;
ties are broken by a generator seeded with the run seed and the iteration, so a run is
reproducible and a redone iteration proposes the same change. When every single change was
tried it moves two tunables one step each; when that is exhausted too it proposes nothing.
On a GPU this is an autotuner whose winning settings are committed.

It also reads the other runs of the same target in the runs folder: a configuration rejected
there against the very engine the worktree holds now (the rejected iteration's ``parent``
commit is the branch head) is not proposed again; once the engine has changed (an accepted
commit), earlier rejections no longer bind.
"""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metainfer.agents.base import AgentError, Proposal, ProposalContext

Config = tuple[tuple[str, Any], ...]


def _key(values: dict[str, Any]) -> Config:
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in values.items()))


@dataclass
class SearchState:
    """What the history says: configurations gated, single changes that lost, directions that won.

    Attributes:
        tried: every configuration gated in this run (the baseline's included).
        losses: ``(name, value-json) -> count`` of rejected candidates that set ``name`` to that value.
        won_direction: ``name -> +1/-1``, the index direction of the last accepted change of ``name``.
    """

    tried: set[Config] = field(default_factory=set)
    losses: dict[tuple[str, str], int] = field(default_factory=dict)
    won_direction: dict[str, int] = field(default_factory=dict)


def _index(space: list[Any], value: Any) -> int | None:
    return space.index(value) if value in space else None


def replay(history: list[dict[str, Any]], space: dict[str, list[Any]]) -> SearchState:
    """Walk the history in order, tracking the best configuration, to learn what lost and what won."""
    state = SearchState()
    best: dict[str, Any] | None = None
    for r in sorted(history, key=lambda r: r["iteration"]):
        t = r.get("tunables")
        if not isinstance(t, dict):
            continue
        state.tried.add(_key(t))
        if best is not None:
            for name, v in t.items():
                if best.get(name) == v:
                    continue
                if r["accepted"]:
                    i0, i1 = _index(space.get(name, []), best.get(name)), _index(space.get(name, []), v)
                    if i0 is not None and i1 is not None:
                        state.won_direction[name] = 1 if i1 > i0 else -1
                else:
                    k = (name, json.dumps(v, sort_keys=True))
                    state.losses[k] = state.losses.get(k, 0) + 1
        if best is None or r["accepted"]:
            best = dict(t)
    return state


def earlier_rejections(ctx: ProposalContext) -> list[dict[str, Any]]:
    """``tunables`` dicts of candidates rejected in *other* runs of ``ctx.target`` (found beside this run in the
    runs folder) whose parent commit is the worktree's head, i.e. rejected against this same engine."""
    run_dir = ctx.record_dir.parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ctx.worktree, capture_output=True, text=True).stdout.strip()
    if not head or not run_dir.parent.is_dir():
        return []
    out = []
    for state_file in run_dir.parent.glob("*/run.json"):
        if state_file.parent == run_dir:
            continue
        try:
            if json.loads(state_file.read_text()).get("target") != ctx.target.name:
                continue
        except (OSError, ValueError):
            continue
        for f in state_file.parent.glob("iter-[0-9][0-9][0-9]/report.json"):
            try:
                r = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if not r.get("accepted") and r.get("parent") == head and isinstance(r.get("tunables"), dict) and r.get("gate"):
                out.append(r["tunables"])
    return out


def _moves(values: dict[str, Any], space: dict[str, list[Any]]) -> list[tuple[str, Any, int, int]]:
    """Every single-value change: ``(name, new, distance in the list, direction)``."""
    out = []
    for name, choices in space.items():
        cur = _index(choices, values.get(name))
        for j, c in enumerate(choices):
            if c == values.get(name):
                continue
            out.append((name, c, 1 if cur is None else abs(j - cur), 0 if cur is None else (1 if j > cur else -1)))
    return out


def read_tunables(path: Path) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """``(values, space)`` of a ``tunables.json``.

    Raises:
        AgentError: the file is missing or not ``{"values": {...}, "space": {name: [choices]}}``.
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise AgentError(f"offline agent: cannot read {path}: {err}; the engine must declare its tunables there") from None
    values, space = data.get("values"), data.get("space")
    if not isinstance(values, dict) or not isinstance(space, dict) or not all(isinstance(c, list) for c in space.values()):
        raise AgentError(f"offline agent: {path} must be {{\"values\": {{name: value}}, \"space\": {{name: [choices]}}}}")
    return values, space


class OfflineAgent:
    """Seeded coordinate search over ``engine/tunables.json``; one changed value per iteration (two when singles run out)."""

    name = "offline"

    def propose(self, ctx: ProposalContext) -> Proposal:
        """Change one tunable of the best configuration (the worktree's) to an untried neighbour.

        Raises:
            AgentError: ``tunables.json`` is missing or malformed.
        """
        path = ctx.engine_dir / "engine" / "tunables.json"
        values, space = read_tunables(path)
        state = replay(ctx.history, space)
        state.tried.add(_key(values))
        earlier = earlier_rejections(ctx)
        for t in earlier:  # rejected against this same engine in another run: never gated again
            state.tried.add(_key(t))
            for name, v in t.items():
                if values.get(name) != v:
                    k = (name, json.dumps(v, sort_keys=True))
                    state.losses[k] = state.losses.get(k, 0) + 1
        rng = random.Random(ctx.seed * 1_000_003 + ctx.iteration)

        def score(m: tuple[str, Any, int, int]) -> tuple:
            name, new, dist, direction = m
            follows = state.won_direction.get(name) == direction
            return (dist, not follows, state.losses.get((name, json.dumps(new, sort_keys=True)), 0), rng.random())

        singles = [m for m in _moves(values, space) if _key({**values, m[0]: m[1]}) not in state.tried]
        if singles:
            name, new, dist, direction = min(singles, key=score)
            changes = {name: new}
            why = self._why(state, name, new, dist, direction)
        else:
            pairs = [(a, b) for a in _moves(values, space) for b in _moves(values, space)
                     if a[0] < b[0] and a[2] == b[2] == 1 and _key({**values, a[0]: a[1], b[0]: b[1]}) not in state.tried]
            if not pairs:
                return Proposal(summary="offline search exhausted: every neighbour of the best configuration was gated",
                                changed=False, transcript=[{"tried": len(state.tried)}])
            a, b = pairs[rng.randrange(len(pairs))]
            changes = {a[0]: a[1], b[0]: b[1]}
            why = "every single change of the best was gated; moving two tunables one step each"
        old = {k: values.get(k) for k in changes}
        data = json.loads(path.read_text())
        data["values"].update(changes)
        path.write_text(json.dumps(data, indent=2) + "\n")
        # None in tunables.json: unset, the launcher's own default
        what = ", ".join(f"{k} {'default' if old[k] is None else old[k]}→{v}" for k, v in changes.items())
        transcript = [{"changes": {k: {"from": old[k], "to": v} for k, v in changes.items()}, "why": why,
                       "tried_configs": len(state.tried), "rejected_in_earlier_runs": len(earlier), "lost_values": {f"{k}={v}": n for (k, v), n in state.losses.items()},
                       "won_direction": state.won_direction}]
        return Proposal(summary=f"tunables: {what} ({why})", expected_gain="not predicted (the gate measures it)",
                        transcript=transcript)

    @staticmethod
    def _why(state: SearchState, name: str, new: Any, dist: int, direction: int) -> str:
        parts = ["untried neighbour of the best" if dist <= 1 else f"nearest untried value ({dist} steps away)"]
        if state.won_direction.get(name) == direction:
            parts.append("continuing a direction that won")
        lost = state.losses.get((name, json.dumps(new, sort_keys=True)), 0)
        if lost:
            parts.append(f"lost {lost}× before from another configuration")
        return "; ".join(parts)

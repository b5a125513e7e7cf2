"""Per-iteration limits of an LLM agent (turns, tokens, USD, wall time) and the price table.

A ``Meter`` counts what one ``propose`` call has spent; ``Limits`` says how much it may
spend. Crossing any limit raises ``BudgetExceeded`` (the run stops at this iteration
boundary, see ``metainfer.agents.base``). The exception carries what was spent so far as
attributes ``cost_usd`` and ``tokens`` (the agents add ``transcript``), so the loop can still book it.

Prices are data (``pricing.json`` beside this file, USD per million tokens, with the date
they were read); a model missing from the table is an error when a USD limit is set,
because a limit that cannot be priced cannot be enforced.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from metainfer.agents.base import BudgetExceeded

PRICING_FILE = Path(__file__).with_name("pricing.json")

#: token kinds, as named in ``Proposal.tokens``
TOKEN_KINDS = ("input", "output", "cache_write", "cache_read")


@dataclass(frozen=True)
class Price:
    """USD per million tokens of each kind (``input`` uncached, ``output``, ``cache_write`` 5-minute, ``cache_read``)."""

    input: float
    output: float
    cache_write: float
    cache_read: float

    def cost(self, tokens: dict[str, int]) -> float:
        """USD for ``tokens`` (counts by kind, missing kinds count 0)."""
        return sum(tokens.get(k, 0) * getattr(self, k) for k in TOKEN_KINDS) / 1e6


@cache
def price_table() -> dict[str, Price]:
    """The price table of ``pricing.json``: model id (or id prefix) -> ``Price``."""
    data = json.loads(PRICING_FILE.read_text())
    return {name: Price(**p) for name, p in data["models"].items()}


def price_for(model: str) -> Price | None:
    """The price of ``model``: an exact entry, else the longest entry that prefixes it
    (so ``claude-sonnet-4-5-20250929`` gets ``claude-sonnet-4-5``), else None."""
    table = price_table()
    if model in table:
        return table[model]
    prefixes = [k for k in table if model.startswith(k)]
    return table[max(prefixes, key=len)] if prefixes else None


@dataclass(frozen=True)
class Limits:
    """What one iteration of an agent may spend; None means no limit.

    Attributes:
        max_turns: model calls (API agent) or ``--max-turns`` (CLI agent).
        max_tokens: input + output + cache tokens summed over the iteration.
        max_usd: USD for the iteration (the loop's ``ctx.budget_usd_left`` also applies).
        time_limit_s: wall seconds for the iteration (``ctx.deadline`` also applies).
    """

    max_turns: int | None = 40
    max_tokens: int | None = 3_000_000
    max_usd: float | None = 10.0
    time_limit_s: float | None = 3600.0

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_tokens", "max_usd", "time_limit_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"agent limit {name}={value} must be positive (or None for no limit)")


@dataclass
class Meter:
    """Spend of one iteration against ``Limits``, plus the run's own USD and time bounds.

    Args:
        limits: the per-iteration limits.
        price: the model's price, or None when unknown (then a USD limit is refused).
        usd_left: the run's remaining USD (``ctx.budget_usd_left``), or None.
        deadline: the run's ``time.time()`` deadline (``ctx.deadline``), or None.

    Raises:
        ValueError: a USD limit is set but the model has no price (add it to pricing.json).
    """

    limits: Limits
    price: Price | None
    usd_left: float | None = None
    deadline: float | None = None
    model: str = ""
    turns: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    cost_usd: float = 0.0
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.price is None and (self.limits.max_usd is not None or self.usd_left is not None):
            raise ValueError(
                f"no price for model {self.model!r} in {PRICING_FILE}; add its USD-per-million-token rates "
                "there (input, output, cache_write, cache_read) or run without a USD limit"
            )

    @property
    def usd_cap(self) -> float | None:
        """The binding USD limit of this iteration (the smaller of per-iteration and run)."""
        caps = [c for c in (self.limits.max_usd, self.usd_left) if c is not None]
        return min(caps) if caps else None

    def time_left(self) -> float | None:
        """Seconds until the binding deadline, or None without one."""
        ends = [e for e in (self.deadline, self.started + self.limits.time_limit_s if self.limits.time_limit_s else None) if e]
        return min(ends) - time.time() if ends else None

    def before_turn(self) -> None:
        """Check turns and time before a model call.

        Raises:
            BudgetExceeded: the turn limit is reached or no time is left.
        """
        if self.limits.max_turns is not None and self.turns >= self.limits.max_turns:
            self._exceeded(f"turn limit reached: {self.turns} of {self.limits.max_turns} turns used")
        left = self.time_left()
        if left is not None and left <= 0:
            self._exceeded(f"time limit reached ({-left:.0f} s past the deadline)")
        self.turns += 1

    def charge(self, tokens: dict[str, int], cost_usd: float | None = None) -> None:
        """Add one call's token counts (and its cost, else priced here) and check the limits.

        Raises:
            BudgetExceeded: tokens or USD over the limit (the call is still counted).
        """
        for k in TOKEN_KINDS:
            self.tokens[k] += int(tokens.get(k, 0) or 0)
        if cost_usd is None:
            cost_usd = self.price.cost(tokens) if self.price else 0.0
        self.cost_usd += cost_usd
        total = sum(self.tokens.values())
        if self.limits.max_tokens is not None and total > self.limits.max_tokens:
            self._exceeded(f"token limit reached: {total} tokens > {self.limits.max_tokens}")
        cap = self.usd_cap
        if cap is not None and self.cost_usd > cap:
            self._exceeded(f"USD limit reached: spent ${self.cost_usd:.4f} > ${cap:.4f}")

    def output_cap(self, wanted: int) -> int:
        """``max_tokens`` for the next call: ``wanted``, cut to what the token budget still allows (at least 1)."""
        if self.limits.max_tokens is None:
            return wanted
        return max(1, min(wanted, self.limits.max_tokens - sum(self.tokens.values())))

    def _exceeded(self, why: str) -> None:
        err = BudgetExceeded(f"{why}; the run stops at this iteration (raise the limit to go on)")
        err.cost_usd = self.cost_usd  # type: ignore[attr-defined]
        err.tokens = dict(self.tokens)  # type: ignore[attr-defined]
        raise err

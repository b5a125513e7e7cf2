"""One Messages API call with bounded, recorded retries, and its usage in our token kinds.

The SDK's own retries are switched off (``max_retries=0`` on the client) so that each
retry is ours: counted, bounded, logged, and written into the transcript as an event
``{"event": "retry", "status": 429, "attempt": 1, "wait_s": 2.0}``. Retried: 429 (rate
limit), 529 (overloaded), 500/502/503/504, and connection errors or timeouts. The wait is
the server's ``retry-after`` header when it sends one, else exponential backoff with
jitter, capped; never past the iteration's time limit.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Callable

import anthropic

from metainfer.agents.base import AgentError, BudgetExceeded

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failed call.

    Attributes:
        retries: retries after the first attempt (0 = none).
        base_s: first backoff in seconds; doubles per attempt.
        cap_s: longest single wait in seconds, ``retry-after`` included.
    """

    retries: int = 6
    base_s: float = 2.0
    cap_s: float = 60.0

    def wait(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if retry_after:
            try:
                return min(self.cap_s, max(0.0, float(retry_after)))
            except ValueError:
                pass  # an HTTP date: fall back to backoff
        return min(self.cap_s, self.base_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.0))


def usage_tokens(usage: Any) -> dict[str, int]:
    """The API's ``usage`` as ``{"input", "output", "cache_write", "cache_read"}`` token counts (None → 0)."""
    return {
        "input": int(getattr(usage, "input_tokens", 0) or 0),
        "output": int(getattr(usage, "output_tokens", 0) or 0),
        "cache_write": int(getattr(usage, "cache_creation_input_tokens", 0) or 0),
        "cache_read": int(getattr(usage, "cache_read_input_tokens", 0) or 0),
    }


def create_with_retries(client: anthropic.Anthropic, request: dict[str, Any], policy: RetryPolicy,
                        events: list[dict[str, Any]], time_left: Callable[[], float | None]) -> Any:
    """``client.messages.create(**request)``, retried per ``policy``; each retry appended to ``events``.

    Raises:
        AgentError: a non-retryable API error (bad request, authentication, ...) or retries used up;
            the message names the HTTP status and the API's error text.
        BudgetExceeded: the next wait would run past the time limit.
    """
    attempt = 0
    while True:
        try:
            return client.messages.create(**request)
        except anthropic.APIStatusError as err:
            status, headers = err.status_code, err.response.headers
            detail = f"HTTP {status}: {err.message}"
            if status not in RETRY_STATUSES:
                hint = " (check ANTHROPIC_API_KEY)" if status in (401, 403) else ""
                raise AgentError(f"Messages API refused the request: {detail}{hint}") from err
            retry_after = headers.get("retry-after")
        except anthropic.APIConnectionError as err:
            status, retry_after, detail = None, None, f"connection error: {err}"
        attempt += 1
        if attempt > policy.retries:
            raise AgentError(f"Messages API still failing after {policy.retries} retries; last: {detail}")
        wait = policy.wait(attempt, retry_after)
        left = time_left()
        if left is not None and wait >= left:
            raise BudgetExceeded(f"time limit: cannot wait {wait:.1f} s to retry ({detail}); {left:.1f} s left")
        events.append({"event": "retry", "status": status, "attempt": attempt, "wait_s": round(wait, 3),
                       "error": detail, "time": time.time()})
        log.warning("Messages API %s; retry %d/%d in %.1f s", detail, attempt, policy.retries, wait)
        time.sleep(wait)

"""One request in flight, seen from the asyncio side: its outputs as an async iterator.

``RequestStream`` is created by ``ServerState.open`` (which admits and submits synchronously, so a
full server answers 503 before any response starts). Iterating it yields the request's
``StepOutput`` s until the finished one; ``aclose()`` (or a cancellation while waiting, or garbage
collection of an unfinished stream) aborts the request on the engine thread, which frees its slot
before the next step.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Hashable

from metainfer.serve.protocol import ApiError

if TYPE_CHECKING:
    from metainfer.serve.state import ServerState


class RequestStream:
    """Async iterator over one request's ``StepOutput`` s.

    Raises (from ``__anext__``):
        ApiError: 400 if the scheduler refused the request, 500 if a step failed.
    """

    def __init__(self, state: ServerState, request_id: Hashable, queue: asyncio.Queue):
        self.state, self.request_id, self.queue = state, request_id, queue
        self.done = False
        self.t0 = self.last = time.perf_counter()

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Any:
        if self.done:
            raise StopAsyncIteration
        try:
            item = await self.queue.get()
        except BaseException:  # cancelled: the client went away
            self.close()
            raise
        m = self.state.metrics
        if isinstance(item, Exception):
            self._end()
            raise ApiError(400 if isinstance(item, ValueError) else 500, str(item))
        now = time.perf_counter()
        if item.new_tokens:
            first = item.output_tokens == len(item.new_tokens)
            (m.ttft if first else m.tpot).observe(now - (self.t0 if first else self.last))
            m.generation_tokens.inc(len(item.new_tokens))
            self.last = now
        if item.finished:
            m.finished.labels(item.finish_reason or "unknown").inc()
            self._end()
        return item

    def close(self) -> None:
        """Abort the request unless it finished (idempotent)."""
        if not self.done:
            self._end()
            self.state.loop.abort(self.request_id)

    async def aclose(self) -> None:
        """``close`` for ``contextlib.aclosing``."""
        self.close()

    def _end(self) -> None:
        self.done = True
        self.state.active -= 1

    def __del__(self) -> None:
        if not self.done:
            self.close()


async def unless_disconnected(request: Any, coro: Any, every_s: float = 0.5) -> Any:
    """Await ``coro``; if the HTTP client disconnects first, cancel it (its streams abort their
    requests) and raise ``ApiError`` 499. ``request`` is the Starlette request."""
    task = asyncio.ensure_future(coro)
    while True:
        done, _ = await asyncio.wait({task}, timeout=every_s)
        if done:
            return task.result()
        if await request.is_disconnected():
            task.cancel()
            raise ApiError(499, "the client closed the connection", code="client_closed")

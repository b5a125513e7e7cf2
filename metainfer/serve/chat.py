"""``POST /v1/chat/completions``: messages through the chat template; the reply split into
``reasoning_content`` and ``content``, and Qwen XML tool calls returned as OpenAI ``tool_calls``;
plain or streamed (SSE)."""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, AsyncIterator

from fastapi.responses import JSONResponse, StreamingResponse

from metainfer.serve.completions import sse, usage
from metainfer.serve.parsers import CALL_OPEN, THINK_CLOSE, held_prefix, parse_tool_calls, split_reasoning
from metainfer.serve.protocol import ApiError, ChatCompletionRequest, refuse_unsupported
from metainfer.serve.request import unless_disconnected
from metainfer.serve.state import ServerState
from metainfer.serve.text import Detokenizer

ROLES = ("system", "user", "assistant", "tool", "developer")


def _check_messages(messages: list[dict[str, Any]]) -> None:
    """Raises ApiError 400 for an empty list or a message whose role is not one of ``ROLES``."""
    if not messages:
        raise ApiError(400, "messages is empty; send at least one message", param="messages")
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ROLES:
            raise ApiError(400, f"messages[{i}].role={role!r}: the role must be one of {', '.join(ROLES)}",
                           param=f"messages.{i}.role")


def _top_logprobs(req: ChatCompletionRequest) -> int | None:
    """The engine's ``logprobs`` for a chat request: None unless ``logprobs`` is true, else ``top_logprobs`` (0-20).

    Raises:
        ApiError 400: top_logprobs out of [0, 20], or given without logprobs=true (OpenAI's rule).
    """
    top = req.top_logprobs
    if top is not None and not 0 <= top <= 20:
        raise ApiError(400, f"top_logprobs={top} must be in [0, 20]", param="top_logprobs")
    if not req.logprobs:
        if top:
            raise ApiError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
        return None
    return top or 0


def logprob_content(state: ServerState, lps: list[Any] | None) -> list[dict]:
    """OpenAI chat ``logprobs.content`` entries ({token, logprob, bytes, top_logprobs}) of the engine's logprobs
    (the same ``TokenLogprob`` s /v1/completions reports)."""

    def entry(tid: int, lp: float) -> dict:
        text = state.text.token_text(tid)
        return {"token": text, "logprob": lp, "bytes": list(text.encode("utf-8"))}

    return [{**entry(lp.token, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]} for lp in lps or []]


class _Reply:
    """The reply so far, split for streaming: what may be sent as reasoning and as content now."""

    def __init__(self, think_open: bool, tools: bool):
        self.think_open, self.tools = think_open, tools
        self.sent_reasoning = self.sent_content = 0

    def deltas(self, text: str, final: bool) -> tuple[str, str]:
        """(new reasoning, new content) of ``text`` (all text so far); holds back a partial
        ``</think>`` and, with tools, everything from ``<tool_call>`` on (sent as tool_calls at the end)."""
        reasoning, content, still_open = split_reasoning(text, self.think_open)
        reasoning = reasoning or ""
        if still_open and not final:
            reasoning = reasoning[: held_prefix(reasoning, THINK_CLOSE)]
        if self.tools:
            content = content[: held_prefix(content, CALL_OPEN)]
        r, c = reasoning[self.sent_reasoning :], content[self.sent_content :]
        self.sent_reasoning, self.sent_content = len(reasoning), len(content)
        return r, c


def _message(text: str, think_open: bool, tools: bool) -> tuple[dict, bool]:
    """The assistant message of a whole reply, and whether it holds tool calls."""
    reasoning, content, _ = split_reasoning(text, think_open)
    calls = []
    if tools:
        content, calls = parse_tool_calls(content)
    msg: dict[str, Any] = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if calls:
        msg["tool_calls"] = [c.to_openai() for c in calls]
    return msg, bool(calls)


async def handle(state: ServerState, req: ChatCompletionRequest, request: Any) -> Any:
    """Answer one chat request (JSON or an SSE stream); ``request`` is the HTTP request (a client
    gone before a JSON answer aborts it too)."""
    state.check_model(req.model)
    refuse_unsupported(req)
    _check_messages(req.messages)
    top = _top_logprobs(req)
    tools = bool(req.tools) and req.tool_choice != "none"
    try:
        ids, think_open = state.text.render_chat(req.messages, req.tools, req.chat_template_kwargs)
    except ValueError as err:
        raise ApiError(400, str(err), param="messages") from None
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    params = state.sampling_params(req, ids, max_tokens, top)
    rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    detok = Detokenizer(state.text, req.stop_strings())
    stream = state.open(ids, params)  # 503 here, before any response starts

    async def outputs() -> AsyncIterator[tuple[bool, str | None, int, list[dict]]]:
        """(final, finish reason, tokens so far, logprobs content entries) per step; ``detok`` holds the text."""
        async with contextlib.aclosing(stream):
            out = await stream.__anext__()
            while True:
                detok.push(out.new_tokens, final=out.finished)
                final = out.finished or detok.stopped
                entries = logprob_content(state, out.logprobs) if top is not None else []
                yield final, ("stop" if detok.stopped else out.finish_reason), out.output_tokens, entries
                if final:
                    return
                out = await stream.__anext__()

    pending: list[dict] = []  # streamed logprobs entries not sent yet (they ride on the next chunk)

    def chunk(delta: dict, finish: str | None) -> dict:
        lp = None
        if top is not None and delta.get("role") is None:
            lp = {"content": pending[:]}
            pending.clear()
        return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": state.cfg.model_name,
                "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]}

    if not req.stream:

        async def collect() -> dict:
            reason, n, content = None, 0, []
            async for _, reason, n, entries in outputs():
                content += entries
            msg, called = _message(detok.text, think_open, tools)
            lp = {"content": content} if top is not None else None
            return {"id": rid, "object": "chat.completion", "created": created, "model": state.cfg.model_name,
                    "choices": [{"index": 0, "message": msg, "logprobs": lp, "finish_reason": "tool_calls" if called else reason}],
                    "usage": usage(len(ids), n)}

        return JSONResponse(await unless_disconnected(request, collect()))

    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    reply = _Reply(think_open, tools)

    async def events() -> AsyncIterator[str]:
        yield sse(chunk({"role": "assistant", "content": ""}, None))
        n, reason = 0, None
        try:
            async for final, reason, n, entries in outputs():
                pending.extend(entries)
                r, c = reply.deltas(detok.text[: detok.sent] if not final else detok.text, final)
                if r:
                    yield sse(chunk({"reasoning_content": r}, None))
                if c:
                    yield sse(chunk({"content": c}, None))
        except ApiError as err:  # the status line is sent already: the error goes in the stream
            yield sse(err.body())
            yield sse("[DONE]")
            return
        msg, called = _message(detok.text, think_open, tools)
        if called:
            yield sse(chunk({"tool_calls": [dict(tc, index=i) for i, tc in enumerate(msg["tool_calls"])]}, None))
        elif tools:  # held back in case it was a tool call; it was not
            reply.tools = False
            _, c = reply.deltas(detok.text, True)
            if c:
                yield sse(chunk({"content": c}, None))
        yield sse(chunk({}, "tool_calls" if called else reason))
        if include_usage:
            yield sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": state.cfg.model_name,
                       "choices": [], "usage": usage(len(ids), n)})
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")

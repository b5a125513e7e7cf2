"""``POST /v1/completions``: one prompt (text or token ids), plain or streamed (SSE), with logprobs."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any, AsyncIterator

from fastapi.responses import JSONResponse, StreamingResponse

from metainfer.serve.protocol import ApiError, CompletionRequest, refuse_unsupported
from metainfer.serve.request import unless_disconnected
from metainfer.serve.state import ServerState
from metainfer.serve.text import Detokenizer


def prompt_ids(state: ServerState, prompt: Any) -> list[int]:
    """Token ids of a completions ``prompt``.

    Raises:
        ApiError 400: more than one prompt, or an empty one.
    """
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise ApiError(400, f"{len(prompt)} prompts in one request; send one prompt per request", param="prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        return state.text.encode(prompt)
    return list(prompt)


def usage(prompt: int, completion: int) -> dict:
    """OpenAI ``usage``."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def sse(obj: dict | str) -> str:
    """One server-sent event line pair."""
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


class _Logprobs:
    """OpenAI completions ``logprobs``: tokens, token_logprobs, top_logprobs, text_offset."""

    def __init__(self, state: ServerState):
        self.state, self.offset = state, 0

    def block(self, lps: list[Any] | None) -> dict | None:
        if lps is None:
            return None
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for lp in lps:
            text = self.state.text.token_text(lp.token)
            out["tokens"].append(text)
            out["token_logprobs"].append(lp.logprob)
            out["top_logprobs"].append({self.state.text.token_text(t): v for t, v in lp.top})
            out["text_offset"].append(self.offset)
            self.offset += len(text)
        return out


def _merge(a: dict | None, b: dict | None) -> dict | None:
    if a is None or b is None:
        return a or b
    return {k: a[k] + b[k] for k in a}


async def handle(state: ServerState, req: CompletionRequest, request: Any) -> Any:
    """Answer one completions request (JSON or an SSE stream); ``request`` is the HTTP request
    (a client gone before a JSON answer aborts it too)."""
    state.check_model(req.model)
    refuse_unsupported(req)
    if req.echo:
        raise ApiError(400, "echo is not supported", param="echo")
    if req.logprobs is not None and not 0 <= req.logprobs <= 20:
        raise ApiError(400, f"logprobs={req.logprobs} must be in [0, 20]", param="logprobs")
    ids = prompt_ids(state, req.prompt)
    params = state.sampling_params(req, ids, req.max_tokens, req.logprobs)
    rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    detok = Detokenizer(state.text, req.stop_strings())
    lps = _Logprobs(state)
    stream = state.open(ids, params)  # 503 here, before any response starts

    def chunk(text: str, logprobs: dict | None, finish: str | None) -> dict:
        return {"id": rid, "object": "text_completion", "created": created, "model": state.cfg.model_name,
                "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}]}

    async def outputs() -> AsyncIterator[tuple[str, dict | None, str | None, int]]:
        """(new text, logprobs block, finish reason or None, tokens so far) per step; stops at a stop string."""
        async with contextlib.aclosing(stream):
            out = await stream.__anext__()
            while True:
                text = detok.push(out.new_tokens, final=out.finished)
                reason = "stop" if detok.stopped else out.finish_reason
                yield text, lps.block(out.logprobs), reason if (out.finished or detok.stopped) else None, out.output_tokens
                if out.finished or detok.stopped:
                    return  # leaving the block closes gen: a stop string aborts the request
                out = await stream.__anext__()

    if not req.stream:

        async def collect() -> dict:
            text, block, reason, n = "", None, None, 0
            async for piece, b, r, n in outputs():
                text, block, reason = text + piece, _merge(block, b), r
            return {**chunk(text, block, reason), "usage": usage(len(ids), n)}

        return JSONResponse(await unless_disconnected(request, collect()))

    include_usage = bool(req.stream_options and req.stream_options.include_usage)

    async def events() -> AsyncIterator[str]:
        n = 0
        try:
            async for piece, b, r, n in outputs():
                if piece or b or r:
                    yield sse(chunk(piece, b, r))
        except ApiError as err:  # the status line is sent already: the error goes in the stream
            yield sse(err.body())
            yield sse("[DONE]")
            return
        if include_usage:
            yield sse({"id": rid, "object": "text_completion", "created": created, "model": state.cfg.model_name,
                       "choices": [], "usage": usage(len(ids), n)})
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


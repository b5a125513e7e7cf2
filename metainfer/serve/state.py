"""What every handler shares: the engine loop, the text side, limits, and ``open`` (admit and
submit a request to the engine thread; its outputs come back as a ``RequestStream``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from metainfer.serve.engine_loop import EngineLoop
from metainfer.serve.metrics import Metrics
from metainfer.serve.protocol import ApiError
from metainfer.serve.request import RequestStream
from metainfer.serve.text import TextSide


@dataclass
class ServeConfig:
    """Server settings.

    Attributes:
        model_name: the id clients put in ``model`` (``/v1/models`` lists it).
        max_batch, max_seq_len: the engine's slots and tokens per slot (the context length).
        max_queue: requests that may wait for a slot; beyond it new ones get 503 + Retry-After.
        api_key: if set, ``Authorization: Bearer <key>`` is required on /v1/*.
        retry_after_s: the Retry-After seconds sent with 503.
    """

    model_name: str
    max_batch: int
    max_seq_len: int
    max_queue: int = 256
    api_key: str | None = None
    retry_after_s: int = 1


class ServerState:
    """Engine module + loop + tokenizer of one server."""

    def __init__(self, engine_module: Any, engine: Any, text: TextSide, cfg: ServeConfig):
        self.mod, self.engine, self.text, self.cfg = engine_module, engine, text, cfg
        self.metrics = Metrics(cfg.max_batch)
        self.loop = EngineLoop(engine_module.Scheduler(engine), self.metrics, cfg.max_batch, cfg.max_seq_len)
        if engine.device.type == "cuda":  # the loop thread launches kernels on the engine's device
            import torch

            self.loop.on_start = lambda: torch.cuda.set_device(engine.device)
        self.active = 0  # requests submitted and not yet finished (asyncio side only)
        self.created = int(time.time())

    def bind(self, aloop: asyncio.AbstractEventLoop) -> None:
        """Deliver the engine thread's outputs on ``aloop``: one ``call_soon_threadsafe`` per step."""

        def deliver(pairs: list[tuple[asyncio.Queue, Any]]) -> None:
            for q, item in pairs:
                q.put_nowait(item)

        self.loop.post = lambda pairs: aloop.call_soon_threadsafe(deliver, pairs)

    # ---- checks ---------------------------------------------------------------------
    def check_model(self, model: str) -> None:
        """Raises ApiError 404 ``model_not_found`` (as OpenAI and vLLM) for a model id this server does not serve."""
        if model != self.cfg.model_name:
            raise ApiError(404, f"model {model!r} is not served here; use {self.cfg.model_name!r} (GET /v1/models)",
                           param="model", code="model_not_found")

    def sampling_params(self, req: Any, prompt: list[int], max_tokens: int | None, logprobs: int | None) -> Any:
        """The engine's ``SamplingParams`` for a request, after the checks.

        Raises:
            ApiError 400: empty prompt, prompt ids outside the vocab, a prompt longer than the
                context, max_tokens < 1 or beyond the context, n != 1, bad sampling values.

        The context rule is vLLM's: prompt + max_tokens <= max_seq_len (max_model_len); without
        max_tokens a request may run to the end of the context (max_seq_len - prompt length).
        """
        ctx, vocab = self.cfg.max_seq_len, self.engine.dims.vocab_size
        if req.n != 1:
            raise ApiError(400, f"n={req.n}: only n=1 is supported; send n requests", param="n")
        if not prompt:
            raise ApiError(400, "the prompt is empty; send at least one token", param="prompt")
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise ApiError(400, f"prompt token ids outside [0, {vocab}): {bad[:5]}", param="prompt")
        if len(prompt) >= ctx:
            raise ApiError(400, f"the prompt has {len(prompt)} tokens; this server's context is {ctx} tokens "
                           "(prompt + output); shorten it", param="prompt", code="context_length_exceeded")
        if max_tokens is None:
            max_tokens = ctx - len(prompt)
        if max_tokens < 1:
            raise ApiError(400, f"max_tokens={max_tokens} must be at least 1", param="max_tokens")
        if len(prompt) + max_tokens > ctx:
            raise ApiError(400, f"prompt ({len(prompt)} tokens) + max_tokens ({max_tokens}) exceeds the context of {ctx} "
                           "tokens; lower max_tokens", param="max_tokens", code="context_length_exceeded")
        temp = 1.0 if req.temperature is None else req.temperature
        if not 0.0 <= temp <= 2.0:
            raise ApiError(400, f"temperature={temp} must be in [0, 2]", param="temperature")
        top_k = 0 if req.top_k in (None, -1) else req.top_k
        stops = tuple(req.stop_token_ids or ()) + (() if req.ignore_eos else self.text.stop_ids)
        try:
            return self.mod.SamplingParams(
                max_tokens=max_tokens, temperature=temp, top_p=1.0 if req.top_p is None else req.top_p, top_k=top_k,
                seed=req.seed, ignore_eos=True, stop_token_ids=tuple(dict.fromkeys(stops)), logprobs=logprobs,
            )
        except ValueError as err:
            raise ApiError(400, str(err).replace("SamplingParams.", ""), param=_param_of(str(err))) from None

    def admit(self) -> None:
        """Raises ApiError 503 (with Retry-After) when max_batch + max_queue requests are in flight."""
        if self.active >= self.cfg.max_batch + self.cfg.max_queue:
            self.metrics.rejected.labels("queue_full").inc()
            raise ApiError(503, f"the server is full ({self.active} requests in flight, queue limit {self.cfg.max_queue}); "
                           "retry later", code="queue_full", headers={"Retry-After": str(self.cfg.retry_after_s)})

    # ---- the bridge -------------------------------------------------------------------
    def open(self, prompt: list[int], params: Any) -> RequestStream:
        """Admit and submit a request now; iterate the returned stream for its outputs.

        Raises:
            ApiError: 503 when max_batch + max_queue requests are in flight.
        """
        self.admit()
        rid = uuid.uuid4().hex
        q: asyncio.Queue = asyncio.Queue()
        self.active += 1
        self.metrics.prompt_tokens.inc(len(prompt))
        self.loop.submit(rid, prompt, params, q)
        return RequestStream(self, rid, q)


def _param_of(message: str) -> str | None:
    for name in ("max_tokens", "temperature", "top_p", "top_k", "seed", "logprobs", "stop_token_ids"):
        if name in message:
            return name
    return None

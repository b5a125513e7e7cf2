"""OpenAI request bodies (pydantic) and the OpenAI error shape.

Unknown fields are accepted and ignored (clients send many); the fields read are listed per
model. OpenAI parameters that would change the answer and are not implemented are refused with a 400
naming the parameter (``refuse_unsupported``), not ignored. vLLM extensions accepted: ``top_k``, ``ignore_eos``, ``stop_token_ids``,
``chat_template_kwargs`` (e.g. ``{"enable_thinking": false}``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class ApiError(Exception):
    """An error answered in the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``.

    Attributes:
        status: HTTP status (400 bad request, 401 no/wrong key, 404 unknown model or route, 405 wrong method,
            503 queue full, 500 engine failure).
        headers: extra response headers (``Retry-After`` with 503).
    """

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 kind: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind or {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                             503: "service_unavailable"}.get(status, "server_error")
        self.headers = headers or {}

    def body(self) -> dict:
        """The JSON body."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a last chunk with usage and no choices."""

    model_config = ConfigDict(extra="allow")
    include_usage: bool = False


class _Common(BaseModel):
    """Fields both endpoints read."""

    model_config = ConfigDict(extra="allow")
    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    n: int = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None

    def stop_strings(self) -> list[str]:
        """``stop`` as a list (empty strings dropped)."""
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]


class CompletionRequest(_Common):
    """``POST /v1/completions``: ``prompt`` is a string, a list of token ids, or a list of one of either."""

    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = None
    echo: bool = False


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions``: messages rendered with the checkpoint's chat template."""

    messages: list[dict[str, Any]]
    max_completion_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


def refuse_unsupported(req: _Common) -> None:
    """Refuse OpenAI parameters this server does not implement, when set to anything but their no-op value: ignoring
    them would answer something other than what the client asked for (docs/SERVE.md, "Not supported").

    Raises:
        ApiError 400: naming the parameter (``param``) and what is accepted instead.
    """
    extra = req.model_extra or {}
    checks = [
        ("logit_bias", lambda v: not v, "logit_bias is not supported; send it empty or leave it out"),
        ("response_format", lambda v: v is None or (isinstance(v, dict) and v.get("type") == "text" and len(v) == 1),
         'response_format is not supported (no JSON mode or schema); only {"type": "text"} is accepted'),
        ("presence_penalty", lambda v: not v, "presence_penalty is not supported; send 0 or leave it out"),
        ("frequency_penalty", lambda v: not v, "frequency_penalty is not supported; send 0 or leave it out"),
        ("repetition_penalty", lambda v: v is None or v == 1, "repetition_penalty is not supported; send 1 or leave it out"),
    ]
    if isinstance(req, CompletionRequest):
        checks += [("best_of", lambda v: v is None or v == 1, "best_of is not supported; only best_of=1 (send n requests)"),
                   ("suffix", lambda v: not v, "suffix is not supported (no insertion); leave it out")]
    for name, ok, why in checks:
        value = extra.get(name)
        if not ok(value):
            raise ApiError(400, f"{name}={value!r}: {why}", param=name)
    if isinstance(req, ChatCompletionRequest) and req.tool_choice not in (None, "auto", "none"):
        raise ApiError(400, f"tool_choice={req.tool_choice!r} is not supported: the model is never forced to call a "
                       'tool; send "auto" or "none"', param="tool_choice")

"""OpenAI request bodies (pydantic) and the OpenAI error shape.

Unknown fields are accepted and ignored (clients send many); the fields read are listed per
model. vLLM extensions accepted: ``top_k``, ``ignore_eos``, ``stop_token_ids``,
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

"""The FastAPI app: routes, API-key check, and errors in the OpenAI shape.

Routes: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``,
``GET /health`` (200 while the engine thread is alive, else 503), ``GET /metrics`` (Prometheus).
Every error has the OpenAI shape ``{"error": {"message", "type", "param", "code"}}``: a malformed
body is a 400 (FastAPI's 422 rewritten; invalid JSON says where and why), an unknown model a 404
``model_not_found``, an unknown route a 404 and a wrong method a 405 (not FastAPI's ``{"detail"}``).
"""

from __future__ import annotations

import asyncio
import hmac
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from metainfer.serve import chat, completions
from metainfer.serve.protocol import ApiError, ChatCompletionRequest, CompletionRequest
from metainfer.serve.state import ServerState


def create_app(state: ServerState) -> FastAPI:
    """The app over ``state``; its lifespan starts and stops the engine thread."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state.bind(asyncio.get_running_loop())
        state.loop.start()
        try:
            yield
        finally:
            state.loop.stop()

    app = FastAPI(title="metainfer serve", lifespan=lifespan)
    app.state.serve = state

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        if err.status_code == 404:
            msg = f"no route {request.url.path}; this server has /v1/models, /v1/completions, /v1/chat/completions, /health, /metrics"
        elif err.status_code == 405:
            msg = f"method {request.method} is not allowed on {request.url.path}"
        else:
            msg = str(err.detail)
        code = {404: "not_found", 405: "method_not_allowed"}.get(err.status_code)
        kind = "invalid_request_error" if err.status_code < 500 else None
        return JSONResponse(ApiError(err.status_code, msg, code=code, kind=kind).body(), status_code=err.status_code,
                            headers=getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        if first.get("type") == "json_invalid":  # loc is ("body", character offset): not a parameter
            at = [p for p in first.get("loc", ()) if p != "body"]
            why = (first.get("ctx") or {}).get("error", "")
            msg = f"the request body is not valid JSON{f' (at character {at[0]})' if at else ''}{f': {why}' if why else ''}"
            return JSONResponse(ApiError(400, msg).body(), status_code=400)
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(ApiError(400, f"invalid request body: {where}: {first.get('msg', err)}", param=where or None).body(),
                            status_code=400)

    def auth(request: Request) -> None:
        """Raises ApiError 401 unless the request carries the server's API key (when one is set)."""
        key = state.cfg.api_key
        if key and not hmac.compare_digest(request.headers.get("authorization", "").encode(), f"Bearer {key}".encode()):
            raise ApiError(401, "missing or wrong API key; send 'Authorization: Bearer <key>'", code="invalid_api_key")

    v1 = [Depends(auth)]

    @app.get("/health")
    async def health() -> Response:
        alive = state.loop.alive
        return JSONResponse({"status": "ok" if alive else "engine thread stopped"}, status_code=200 if alive else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", dependencies=v1)
    async def models() -> dict:
        return {"object": "list", "data": [{"id": state.cfg.model_name, "object": "model", "created": state.created,
                                            "owned_by": "metainfer", "max_model_len": state.cfg.max_seq_len}]}

    @app.post("/v1/completions", dependencies=v1)
    async def create_completion(req: CompletionRequest, request: Request):
        return await completions.handle(state, req, request)

    @app.post("/v1/chat/completions", dependencies=v1)
    async def create_chat_completion(req: ChatCompletionRequest, request: Request):
        return await chat.handle(state, req, request)

    return app

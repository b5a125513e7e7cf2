"""A local stand-in for the Anthropic Messages API, driven by a script of replies.

``POST /v1/messages`` answers with the next scripted reply, shaped like the real API:
a ``message`` object (``id``, ``type``, ``role``, ``model``, ``content`` blocks ``text`` /
``tool_use`` with ids, ``stop_reason``, ``usage`` with cache fields), or an error object
(``{"type": "error", "error": {"type": "rate_limit_error", ...}}``) with its HTTP status and
headers (``retry-after``). It checks requests the way the real API does where our client
could get it wrong: an ``x-api-key`` or ``authorization: Bearer`` header and ``anthropic-version`` headers, ``model``,
``max_tokens`` and ``messages`` present, roles alternating from ``user``, and every
``tool_use`` of the last assistant turn answered by a ``tool_result`` in the next user
turn; a violation is a 400 ``invalid_request_error``, as the real API gives.

Script entries (dicts):
- a reply: ``{"content": [...], "stop_reason": "tool_use", "usage": {"input_tokens": 10, ...}}``;
  ``tool_use`` blocks without an ``id`` get ``toolu_<n>``;
- an error: ``{"status": 429, "error_type": "rate_limit_error", "message": "...", "headers": {"retry-after": "0"}}``.
Once the script is used up every request gets a 400 ("script exhausted").

Listens on 127.0.0.1 on a free port, one thread per request, and shuts itself down after
``lifetime_s`` whatever happens (a test that forgets to stop it leaves nothing running).
"""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_USAGE = {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


class MessagesServer:
    """Scripted Messages API on ``self.url``; ``self.requests`` holds every request body received (dicts, in order)."""

    def __init__(self, script: list[dict[str, Any]], *, lifetime_s: float = 60.0, port: int = 0):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True
        self._stopped = False

    @property
    def url(self) -> str:
        """Base URL to give the SDK (``http://127.0.0.1:<port>``)."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def remaining(self) -> int:
        """Scripted entries not yet served."""
        return len(self.script)

    def start(self) -> MessagesServer:
        """Serve in a daemon thread and arm the lifetime timer; returns self."""
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        """Shut the server down and close its socket (idempotent; also called by the lifetime timer)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._timer.cancel()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> MessagesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _respond(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any], dict[str, str]]:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            problem = _check(body, headers)
            if problem:
                return 400, _error("invalid_request_error", problem), {}
            if not self.script:
                return 400, _error("invalid_request_error", "fake server: script exhausted"), {}
            entry = self.script.pop(0)
        if "status" in entry:
            return entry["status"], _error(entry.get("error_type", "api_error"), entry.get("message", "scripted error")), entry.get("headers", {})
        content = []
        for block in entry.get("content", []):
            block = dict(block)
            if block["type"] == "tool_use" and "id" not in block:
                block["id"] = f"toolu_{next(self._ids):04d}"
            content.append(block)
        stop = entry.get("stop_reason") or ("tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn")
        return 200, {"id": f"msg_{next(self._ids):04d}", "type": "message", "role": "assistant", "model": body.get("model"),
                     "content": content, "stop_reason": stop, "stop_sequence": None,
                     "usage": {**DEFAULT_USAGE, **entry.get("usage", {})}}, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = 10  # seconds a silent client may hold a socket

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] != "/v1/messages":
                    return self._send(404, _error("not_found_error", f"no route {self.path}"), {})
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    return self._send(400, _error("invalid_request_error", "body is not JSON"), {})
                self._send(*server._respond(body, {k.lower(): v for k, v in self.headers.items()}))

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", f"req_{status}")
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

        return Handler


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _check(body: dict[str, Any], headers: dict[str, str]) -> str | None:
    """What the real API would reject in this request, or None."""
    if not (headers.get("x-api-key") or headers.get("authorization", "").startswith("Bearer ")):
        return "authentication missing: neither x-api-key nor authorization: Bearer"
    if not headers.get("anthropic-version"):
        return "anthropic-version header missing"
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: field required"
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        if m.get("role") != ("user" if i % 2 == 0 else "assistant"):
            return f"messages.{i}: roles must alternate, starting with user"
    for i in range(1, len(msgs) - 1, 2):
        asked = {b["id"] for b in _blocks(msgs[i]) if b.get("type") == "tool_use"}
        answered = {b.get("tool_use_id") for b in _blocks(msgs[i + 1]) if b.get("type") == "tool_result"}
        if asked - answered:
            return f"messages.{i + 1}: tool_use ids {sorted(asked - answered)} were not answered with tool_result blocks"
    return None


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [] if isinstance(content, str) else list(content or [])

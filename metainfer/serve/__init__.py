"""``metainfer serve``: a generated engine behind an OpenAI-compatible HTTP server.

One engine thread drives the engine's ``Scheduler.step()`` (continuous batching); FastAPI
handlers talk to it through thread-safe queues (``engine_loop``). ``text`` holds the
checkpoint's tokenizer and chat template, ``parsers`` the reasoning and tool-call parsing,
``completions``/``chat`` the two endpoints, ``app`` the routes, ``launch`` the startup.
"""

from metainfer.serve.app import create_app
from metainfer.serve.state import ServeConfig, ServerState

__all__ = ["ServeConfig", "ServerState", "create_app"]

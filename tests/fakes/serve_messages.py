"""Serve a scripted Messages API conversation on 127.0.0.1, to drive ``metainfer build --agent anthropic`` by hand.

    python tests/fakes/serve_messages.py tests/fakes/scripts/two_iterations.json --port 8765 &
    ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=fake \\
        metainfer build --model qwen3.6-35b-a3b-tiny --quant nvfp4 --gpu cpu --agent anthropic --iterations 2

The script file is JSON, either a list of entries or ``{"replies": [...]}`` (entry format in
``messages_server.py``). The server prints its URL, serves until every entry was used (then
waits ``--linger`` seconds for stragglers) or ``--lifetime`` seconds passed, and, with
``--log FILE``, writes every request body it received as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from messages_server import MessagesServer  # noqa: E402


def load_script(path: Path) -> list[dict]:
    """The entries of a script file (a JSON list, or an object with ``replies``)."""
    data = json.loads(Path(path).read_text())
    return data["replies"] if isinstance(data, dict) else data


def main(argv: list[str] | None = None) -> int:
    """Run the server as described in the module docstring; exit status 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("script", type=Path)
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--lifetime", type=float, default=600.0, help="seconds before the server stops regardless")
    ap.add_argument("--linger", type=float, default=2.0, help="seconds to keep serving after the script is used up")
    ap.add_argument("--log", type=Path, help="write the received request bodies here (JSON)")
    args = ap.parse_args(argv)
    server = MessagesServer(load_script(args.script), lifetime_s=args.lifetime, port=args.port).start()
    print(server.url, flush=True)
    end = time.time() + args.lifetime
    try:
        while time.time() < end and server.remaining:
            time.sleep(0.1)
        time.sleep(min(args.linger, max(0.0, end - time.time())))
    finally:
        server.stop()
        if args.log:
            args.log.write_text(json.dumps(server.requests, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

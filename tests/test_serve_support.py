"""Helpers for the server tests: a real ``metainfer serve`` subprocess on a free port. Holds no tests.

``start_server`` renders the tiny engine with the split-K decode attention reference (batch-
invariant on CPU, so a request's greedy tokens are the same alone and under load), starts the
server and waits for its ready line. ``im_end_checkpoint`` copies the tiny checkpoint with the
lm_head rows of a token and <|im_end|> swapped, so the model emits <|im_end|> where it emitted
that token: the server must stop there (config.json's eos is another id, 1000).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from metainfer.render import render_engine
from metainfer.targets import make_target

TINY = "qwen3.6-35b-a3b-tiny"
KEY = "sk-test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_batch_invariant(out: Path) -> Path:
    """The tiny bf16 CPU engine with ``attention_decode_splits = 8`` in its tunables.json."""
    dest = render_engine(make_target(TINY, "bf16", "cpu"), out, force=True)
    tun = dest / "engine" / "tunables.json"
    data = json.loads(tun.read_text())
    data["values"]["attention_decode_splits"] = 8
    tun.write_text(json.dumps(data, indent=2))
    return dest


def im_end_checkpoint(src: Path, out: Path, token: int, im_end: int = 1002) -> Path:
    """A copy of ``src`` whose lm_head rows of ``token`` and ``im_end`` are swapped."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, out)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    shard = out / index["lm_head.weight"]
    tensors = load_file(shard)
    w = tensors["lm_head.weight"]
    w[[token, im_end]] = w[[im_end, token]].clone()
    save_file(tensors, shard, metadata={"format": "pt"})
    return out


@dataclass
class Server:
    """A running server: its base URL, process and stdout lines so far."""

    url: str
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric from /metrics."""
        with urllib.request.urlopen(self.url.replace("/v1", "/metrics"), timeout=10) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_server(engine: Path | None, checkpoint: Path, *, max_batch: int, max_seq_len: int, max_queue: int,
                 api_key: str | None = KEY, timeout: float = 180, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> Server:
    """Start ``metainfer serve`` on a free port and wait for its ready line (AssertionError on failure).
    ``engine`` None: no ``--engine`` (serve picks the target's build, from ``cwd``); ``env`` adds variables."""
    port = free_port()
    cmd = [sys.executable, "-m", "metainfer.cli", "serve", "--model", TINY, "--quant", "bf16", "--gpu", "cpu",
           "--checkpoint", str(checkpoint), "--port", str(port), "--max-batch", str(max_batch),
           "--max-seq-len", str(max_seq_len), "--max-queue", str(max_queue)]
    if engine is not None:
        cmd += ["--engine", str(engine)]
    if api_key:
        cmd += ["--api-key", api_key]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    server = Server(f"http://127.0.0.1:{port}/v1", proc)
    ready = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            server.lines.append(line.rstrip())
            if "ready at http://" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    t0 = time.monotonic()
    while not ready.wait(0.2):
        if proc.poll() is not None or time.monotonic() - t0 > timeout:
            server.stop()
            raise AssertionError("server did not start:\n" + "\n".join(server.lines))
    return server

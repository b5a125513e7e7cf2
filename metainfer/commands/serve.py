"""``metainfer serve``: the generated engine behind an OpenAI-compatible server (FastAPI + uvicorn)."""

from __future__ import annotations

from pathlib import Path

import typer


def serve(
    model: str = typer.Option(..., "--model", help="registered model name, e.g. qwen3.6-35b-a3b or qwen3.6-35b-a3b-tiny"),
    quant: str = typer.Option(..., "--quant", help="weight format: bf16 or nvfp4"),
    gpu: str = typer.Option(..., "--gpu", help="GPU profile (cpu, h100, h200, b200); must be the device present"),
    checkpoint: Path = typer.Option(..., "--checkpoint", help="checkpoint folder (weights, config, tokenizer files)"),
    engine: Path = typer.Option(None, "--engine", help="engine folder (default: the head of branch metainfer/<target> when built, else generated/<target>, else the template rendered for it)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on"),
    port: int = typer.Option(8000, "--port", help="port to listen on"),
    api_key: str = typer.Option(None, "--api-key", envvar="METAINFER_API_KEY", help="require 'Authorization: Bearer KEY' on /v1/*"),
    max_batch: int = typer.Option(64, "--max-batch", help="concurrent sequences (state slots)"),
    max_seq_len: int = typer.Option(4096, "--max-seq-len", help="context length: prompt + output tokens per sequence"),
    max_queue: int = typer.Option(256, "--max-queue", help="requests that may wait for a slot; more get 503 with Retry-After"),
    served_model_name: str = typer.Option(None, "--served-model-name", help="model id clients send (default: --model)"),
    add_tokenizer: bool = typer.Option(False, "--add-tokenizer", help="a synthetic checkpoint without tokenizer files: write them first"),
    warmup: bool = typer.Option(True, "--warmup/--no-warmup", help="on a GPU, compile every batch-shape class before serving "
                                "(minutes on a cold Triton cache; without it the first requests of each new shape stall)"),
) -> None:
    """Serve /v1/models, /v1/completions, /v1/chat/completions, /health and /metrics until interrupted."""
    from metainfer.serve.launch import LaunchArgs
    from metainfer.serve.launch import serve as run

    run(LaunchArgs(model, quant, gpu, checkpoint, engine, host, port, api_key, max_batch, max_seq_len, max_queue, served_model_name,
                   add_tokenizer, warmup))


def register(app: typer.Typer) -> None:
    """Add ``serve`` to the app."""
    app.command("serve")(serve)

"""Serving benchmark over HTTP with the official openai client (asyncio), against any
OpenAI-compatible server (``metainfer serve``, ``vllm serve``): the same prompts and settings for both.

Closed loop (DESIGN.md ``serve-*``): at each concurrency C (``--concurrency 1,32,64``), C clients
send ``--num-prompts`` (default 2 C, at least 4) streaming /v1/completions requests of
``--input-len`` random token ids (ids below ``--vocab``, seeded) with ``max_tokens = --output-len``
and ``ignore_eos`` (outputs forced to full length). Optional open loop (``--rates 1,4``): Poisson
arrivals at each rate (req/s) of a mixed set (prompt lengths 32-4,096, outputs 16-512; the server
needs a context of 4,608: ``metainfer serve --max-seq-len 4608``).

Per level: TTFT p50/p99 (request sent to first token), TPOT p50/p99 ((latency - TTFT) /
(output tokens - 1)), output tok/s (all output tokens / wall time of the level), and the
requests that failed. Output tokens are those the server's ``usage`` reports (checked against
max_tokens). Prints a table; writes ``<--out>/serve_bench.json``.

Usage on the H200 (the server started by the script, killed at the end)::

    python3 scripts/h200/serve_bench.py --url http://127.0.0.1:8000/v1 --model qwen3.6-35b-a3b \\
        --launch "metainfer serve --model qwen3.6-35b-a3b --quant nvfp4 --gpu h200 --checkpoint CKPT --engine ENGINE" \\
        --out $OUT/metainfer
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Result:
    """One request: seconds to first token, total seconds, output tokens, error text or None."""

    ttft: float
    latency: float
    tokens: int
    error: str | None = None
    sent: float = 0.0  # perf_counter seconds at send (the server's METAINFER_SERVE_TRACE uses the same clock on Linux)


@dataclass
class Level:
    """One concurrency or rate level, summarised."""

    name: str
    requests: int
    failed: int
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    output_tok_s: float
    wall_s: float
    per_request: list[list[float]] | None = None  # [sent, ttft, latency, tokens] per request (seconds)


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


async def _one(client, model: str, prompt: list[int], out_len: int) -> Result:
    t0 = time.perf_counter()
    first, tokens = None, 0
    try:
        stream = await client.completions.create(
            model=model, prompt=prompt, max_tokens=out_len, temperature=0.0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )
        async for chunk in stream:
            if chunk.choices and first is None:
                first = time.perf_counter()
            if chunk.usage:
                tokens = chunk.usage.completion_tokens
        end = time.perf_counter()
        err = None if tokens == out_len else f"{tokens} output tokens, asked for {out_len}"
        return Result((first or end) - t0, end - t0, tokens, err, t0)
    except Exception as e:  # a failed request is counted, the run goes on
        return Result(float("nan"), time.perf_counter() - t0, 0, f"{type(e).__name__}: {e}", t0)


def _summary(name: str, results: list[Result], wall: float) -> Level:
    ok = [r for r in results if r.error is None]
    ttft = [r.ttft * 1e3 for r in ok]
    tpot = [(r.latency - r.ttft) / (r.tokens - 1) * 1e3 for r in ok if r.tokens > 1]
    return Level(name, len(results), len(results) - len(ok), _pct(ttft, 50), _pct(ttft, 99), _pct(tpot, 50), _pct(tpot, 99),
                 sum(r.tokens for r in ok) / wall, wall, [[round(r.sent, 5), round(r.ttft, 5), round(r.latency, 5), r.tokens] for r in results])


async def closed_loop(client, args, conc: int, rng: random.Random) -> Level:
    n = args.num_prompts or max(4, 2 * conc)
    prompts = [[rng.randrange(args.vocab) for _ in range(args.input_len)] for _ in range(n)]
    sem = asyncio.Semaphore(conc)

    async def run(p):
        async with sem:
            return await _one(client, args.model, p, args.output_len)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(run(p) for p in prompts))
    return _summary(f"conc{conc} {args.input_len}/{args.output_len}", results, time.perf_counter() - t0)


async def poisson(client, args, rate: float, rng: random.Random) -> Level:
    n = args.num_prompts or 64
    reqs = [([rng.randrange(args.vocab) for _ in range(rng.randint(32, args.mixed_max_input))], rng.randint(16, args.mixed_max_output))
            for _ in range(n)]
    tasks = []
    t0 = time.perf_counter()
    for p, o in reqs:
        tasks.append(asyncio.create_task(_one(client, args.model, p, o)))
        await asyncio.sleep(rng.expovariate(rate))
    results = await asyncio.gather(*tasks)
    return _summary(f"mixed poisson {rate:g} req/s", results, time.perf_counter() - t0)


def _wait_ready(url: str, key: str, proc: subprocess.Popen, timeout: float) -> None:
    import urllib.request

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"the server exited with status {proc.returncode} before it was ready")
        try:
            req = urllib.request.Request(url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"})
            with urllib.request.urlopen(req, timeout=5):
                return
        except OSError:
            time.sleep(2)
    sys.exit(f"the server at {url} was not ready after {timeout:.0f} s")


def _write(args, levels: list[Level]) -> None:
    """Rewrite ``<out>/serve_bench.json`` (after every level, so a call cut short keeps what was measured)."""
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"url": args.url, "model": args.model, "launch": args.launch, "input_len": args.input_len,
              "output_len": args.output_len, "seed": args.seed, "levels": [asdict(lv) for lv in levels]}
    (args.out / "serve_bench.json").write_text(json.dumps(record, indent=1))


async def main_async(args) -> list[Level]:
    import openai

    rng = random.Random(args.seed)
    async with openai.AsyncOpenAI(base_url=args.url, api_key=args.api_key, max_retries=0, timeout=3600) as client:
        await _one(client, args.model, [rng.randrange(args.vocab) for _ in range(args.input_len)], 8)  # warm-up
        levels = []
        for c in [int(x) for x in args.concurrency.split(",") if x]:
            levels.append(await closed_loop(client, args, c, rng))
            print(_row(levels[-1]), flush=True)
            _write(args, levels)
        for r in [float(x) for x in args.rates.split(",") if x]:
            levels.append(await poisson(client, args, r, rng))
            print(_row(levels[-1]), flush=True)
            _write(args, levels)
    return levels


HEAD = f"{'level':<28} {'reqs':>5} {'fail':>4} {'TTFT p50':>9} {'p99':>9} {'TPOT p50':>9} {'p99':>8} {'out tok/s':>10}"


def _row(lv: Level) -> str:
    return (f"{lv.name:<28} {lv.requests:>5} {lv.failed:>4} {lv.ttft_p50_ms:>8.1f}m {lv.ttft_p99_ms:>8.1f}m "
            f"{lv.tpot_p50_ms:>8.2f}m {lv.tpot_p99_ms:>7.2f}m {lv.output_tok_s:>10.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000/v1")
    ap.add_argument("--model", required=True, help="the model id the server serves")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    ap.add_argument("--concurrency", default="1,32,64")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--num-prompts", type=int, default=0, help="per level (default 2 x concurrency, at least 4; 64 per rate)")
    ap.add_argument("--rates", default="", help="Poisson rates (req/s) for the mixed set, e.g. 1,4,16; empty: none")
    ap.add_argument("--mixed-max-input", type=int, default=4096, help="longest prompt of the mixed set (from 32)")
    ap.add_argument("--mixed-max-output", type=int, default=512, help="longest output of the mixed set (from 16)")
    ap.add_argument("--vocab", type=int, default=248000, help="prompt ids are drawn below this (keep under the special tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--launch", default="", help="start this server command first, wait for it, stop it at the end")
    ap.add_argument("--ready-timeout", type=float, default=1200)
    ap.add_argument("--server-log", type=Path, default=None, help="the launched server's stdout+stderr go here (default: inherited)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    proc = None
    if args.launch:
        log = None
        if args.server_log:
            args.server_log.parent.mkdir(parents=True, exist_ok=True)
            log = args.server_log.open("w")
        t0 = time.monotonic()
        proc = subprocess.Popen(shlex.split(args.launch), stdout=log, stderr=subprocess.STDOUT if log else None)
        try:
            _wait_ready(args.url, args.api_key, proc, args.ready_timeout)
        except SystemExit:
            if args.server_log:
                print("".join(args.server_log.read_text(errors="replace").splitlines(keepends=True)[-40:]), file=sys.stderr)
            proc.kill()
            raise
        print(f"server ready after {time.monotonic() - t0:.0f} s", flush=True)
    try:
        print(f"{args.url}  model {args.model}")
        print(HEAD)
        levels = asyncio.run(main_async(args))
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    _write(args, levels)
    print(f"wrote {args.out / 'serve_bench.json'}")


if __name__ == "__main__":
    main()

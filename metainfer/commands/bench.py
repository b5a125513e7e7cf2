"""``metainfer bench``: one workload on our engine (and optionally a peer), figure ± spread and roofline fraction."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from metainfer.errors import MetainferError, check_checkpoint_folder


def bench(
    engine: Path = typer.Option(..., "--engine", help="engine folder (generated/<target>) holding engine/"),
    checkpoint: Path = typer.Option(..., "--checkpoint", help="checkpoint folder the engine (and the peer) loads"),
    workload: str = typer.Option(..., "--workload", help="one of docs/BENCHMARKS.md: ttft, decode-bs1, conc32, conc64, conc128, "
                                                   "ttft-2k, ttft-8k, prefill-16k"),
    peer: str = typer.Option(None, "--peer", help="also run a peer on the same workload: hf or vllm"),
    rounds: int = typer.Option(5, "--rounds", help="measured samples after one warm-up"),
    seed: int = typer.Option(0, "--seed", help="seed of the random prompts"),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present); cpu runs scaled-down shapes"),
    json_out: Path = typer.Option(None, "--json", help="also write the result here"),
) -> None:
    """Measure one workload of docs/BENCHMARKS.md; print median ± relative spread, roofline fraction (on a GPU), GPU and
    commit."""
    import torch

    from harness.bench import BenchConfig, bench_single, shapes_for
    from harness.env import env_info
    from harness.peers import PeerError, PeerRequest, preflight, run_peer
    from harness.workloads import BenchError, parse_workloads
    from metainfer.targets import detect, get_gpu

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device not in ("cpu", "cuda"):
        raise MetainferError(f"--device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise MetainferError("--device cuda asked for, but this machine has no CUDA device; use --device cpu")
    from harness.gate import cpu_threads

    cpu_threads(device)  # one intra-op thread on the CPU, as the gate (OpenMP threads stretch timings under load)
    if not engine.is_dir():
        from metainfer.build.config import built_engine_hint

        raise MetainferError(f"--engine {engine}: no such folder" + built_engine_hint(engine))
    check_checkpoint_folder(checkpoint)
    if rounds < 1:
        raise MetainferError(f"--rounds must be at least 1, got {rounds}")
    try:
        chosen = parse_workloads(workload)
    except ValueError as err:
        raise MetainferError(str(err)) from None
    if len(chosen) != 1:
        raise MetainferError(f"--workload takes one name, got {workload!r}; run the command once per workload")
    workload = chosen[0].name
    if peer:
        try:
            preflight(peer, device)
        except (PeerError, ValueError) as err:
            raise MetainferError(f"--peer {peer}: {err}") from None
    gpu = detect() if device == "cuda" else get_gpu("cpu")
    shapes = shapes_for("full" if device == "cuda" else "cpu")
    config = BenchConfig([workload], rounds, seed, shapes, device, gpu)
    own = chosen[0].at(shapes)  # the workload's own shape at this scale
    try:
        ours = bench_single(engine, checkpoint, config)[workload]
    except BenchError as err:
        raise MetainferError(f"the engine broke the workload's rules: {err}") from None
    env = env_info(engine)
    result = {"workload": workload, "shapes": own.to_dict(), "rounds": rounds, "seed": seed, "device": device,
              "gpu_profile": gpu.name, "env": env, "engine": ours, "peer": None}
    typer.echo(f"{workload} ({'scaled down: ' if own.scaled_down else ''}{own.prompt} in / {own.output} out / {own.streams} streams)"
               f" on {env['gpu']}, commit {env['commit']}")
    on_gpu = device == "cuda"  # the CPU profile's roofline is nominal: a fraction of it claims nothing
    roof = (f", {100 * ours['roofline_fraction']:.1f}% of roofline ({ours['roofline']:.4g} {ours['unit']})" if on_gpu
            else "; no roofline fraction on the CPU")
    typer.echo(f"  engine: {ours['median']:.4g} {ours['unit']} ± {100 * ours['spread']:.1f}% (range/median, {rounds} samples)"
               + roof)
    if peer:
        try:
            theirs = run_peer(peer, PeerRequest(checkpoint, workload, rounds, shapes, device, seed))
        except (PeerError, ValueError) as err:
            raise MetainferError(f"peer {peer}: {err}") from None
        result["peer"] = theirs
        frac = (theirs["median"] / ours["roofline"]) if ours["higher_is_better"] else (ours["roofline"] / theirs["median"])
        typer.echo(f"  {theirs['peer']}: {theirs['median']:.4g} {theirs['unit']} ± {100 * theirs['spread']:.1f}%"
                   + (f", {100 * frac:.1f}% of roofline" if on_gpu else ""))
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=1, default=str))


def register(app: typer.Typer) -> None:
    """Add ``bench`` to the app."""
    app.command("bench")(bench)

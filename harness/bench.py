"""The gate's bench stage: baseline and candidate engines timed A/B in one process.

Method (docs/BENCHMARKS.md): load both engines (``harness.engine_loader.import_engine``,
each under its own module name), warm each on every selected workload, then run ``rounds``
rounds; in each round every workload is measured on both engines back to back with the same
freshly drawn prompts, the order alternating from round to round (AB, BA, AB, ...) so slow
drift charges both alike. Each figure states its roofline fraction (``harness.roofline``).
Statistics and the objective are in ``harness.stats``.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness import roofline, stats
from harness.engine_loader import import_engine
from harness.workloads import CPU_SHAPES, FULL_SHAPES, BenchError, EngineRunner, Runner, Shapes, Workload, measure, parse_workloads
from metainfer.targets import GpuProfile, get_quant


@dataclass(frozen=True)
class BenchConfig:
    """What the bench stage runs.

    Attributes:
        workloads: names from ``harness.workloads.WORKLOADS``, in order.
        rounds: A/B rounds (samples per engine per workload), at least 1; 5+ for a usable noise bar.
        seed: seeds the prompts (round r, workload w draw from ``seed*1000 + 10*r + w``).
        shapes: ``FULL_SHAPES`` on a GPU, ``CPU_SHAPES`` scaled down.
        device: ``"cuda"`` or ``"cpu"``.
        gpu: the GPU profile for roofline figures.
    """

    workloads: list[str]
    rounds: int
    seed: int
    shapes: Shapes
    device: str
    gpu: GpuProfile
    warmup: int = 1


def shapes_for(scale: str) -> Shapes:
    """``"full"`` -> 256/256/32; ``"cpu"`` -> the scaled CPU shapes.

    Raises:
        ValueError: another name.
    """
    if scale not in ("full", "cpu"):
        raise ValueError(f"--scale must be cpu or full, got {scale!r}")
    return FULL_SHAPES if scale == "full" else CPU_SHAPES


def model_facts(checkpoint_dir: str | Path) -> tuple[dict, str]:
    """(text_config dict, quant name) of a checkpoint, through ``metainfer.checkpoint.CheckpointReader``."""
    from metainfer.checkpoint import CheckpointReader

    reader = CheckpointReader(checkpoint_dir)
    return reader.text_config, reader.quant


def roofline_figure(workload: Workload, text: dict, quant: str, gpu: GpuProfile, shapes: Shapes) -> float:
    """The roofline value of ``workload`` in its own unit: ms for ``ttft``, tok/s for the others.

    Decode figures are taken at the mean context of the generated span, P + N/2.
    """
    q = get_quant(quant)
    ctx = shapes.prompt + shapes.output // 2
    if workload.name == "ttft":
        return roofline.ttft_ms(text, q, gpu, shapes.prompt)
    batch = 1 if workload.name == "decode-bs1" else shapes.streams
    return roofline.decode_tok_s(text, q, gpu, batch, ctx)


def fraction(workload: Workload, measured: float, roof: float) -> float:
    """Fraction of roofline reached: measured/roofline for throughput, roofline/measured for latency."""
    return measured / roof if workload.higher_is_better else roof / measured


def summary(samples: list[float]) -> dict:
    """``{"median", "spread", "samples"}`` of one engine's samples (spread = (max − min)/median)."""
    import statistics

    return {"median": statistics.median(samples), "spread": stats.spread(samples), "samples": samples}


def load_runner(name: str, engine_dir: str | Path, checkpoint_dir: str | Path, config: BenchConfig, vocab: int) -> EngineRunner:
    """Import and load one engine for benchmarking (cache sized for the workload shapes)."""
    module = import_engine(engine_dir)
    s = config.shapes
    engine = module.load(str(checkpoint_dir), device=config.device, max_batch=max(s.streams, 1) + 1,
                         max_seq_len=s.prompt + s.output + 8)
    return EngineRunner(name, module, engine, vocab)


@dataclass
class BenchResult:
    """The bench section of the gate JSON (``data``) and ``ok``: the stage measured cleanly.

    Whether the candidate is better is ``data["objective"]["beats_baseline"]``, the build
    loop's decision; an engine that is merely not faster is a green bench stage.
    """

    data: dict = field(default_factory=dict)
    ok: bool = True


def run_bench(candidate_dir: str | Path, checkpoint_dir: str | Path, config: BenchConfig,
              baseline_dir: str | Path | None = None) -> BenchResult:
    """Benchmark the candidate (A/B against ``baseline_dir`` when given) on the selected workloads.

    Returns:
        ``BenchResult`` whose ``data`` is the gate's ``bench`` JSON: ``scaled_down``, ``shapes``,
        ``rounds``, ``workloads`` (per workload unit, direction, ``candidate``/``baseline``
        summaries, ``ratio``, ``noise``, ``roofline``, ``roofline_fraction``), ``objective``.
        Without a baseline, ``baseline``/``ratio``/``objective`` are None.

    Raises:
        ValueError: rounds < 1 or an unknown workload.
        harness.workloads.BenchError: an engine broke a workload's rules.
    """
    if config.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {config.rounds}")
    workloads = parse_workloads(config.workloads)
    text, quant = model_facts(checkpoint_dir)
    vocab = text["vocab_size"]
    runners: list[Runner] = [load_runner("candidate", candidate_dir, checkpoint_dir, config, vocab)]
    if baseline_dir is not None:
        runners.append(load_runner("baseline", baseline_dir, checkpoint_dir, config, vocab))
    samples = _ab_rounds(runners, workloads, config)
    check_same_outputs(runners)
    runners.clear()  # free both engines before the next gate stage or process
    gc.collect()
    if config.device == "cuda":
        torch.cuda.empty_cache()
    return summarize(samples, workloads, text, quant, config)


def _ab_rounds(runners: list[Runner], workloads: list[Workload], config: BenchConfig) -> dict[str, dict[str, list[float]]]:
    """Warm every runner, then the alternating rounds; ``{runner: {workload: [one sample per round]}}``."""
    for runner in runners:
        for i in range(config.warmup):
            for w in workloads:
                measure(w, runner, config.shapes, seed=-1 - i)
    samples: dict[str, dict[str, list[float]]] = {r.name: {w.name: [] for w in workloads} for r in runners}
    for rnd in range(config.rounds):
        order = runners if rnd % 2 == 0 else runners[::-1]  # AB, BA, AB, ...
        for wi, w in enumerate(workloads):
            seed = config.seed * 1000 + 10 * rnd + wi  # same prompts for both engines of this round
            for runner in order:
                samples[runner.name][w.name].append(measure(w, runner, config.shapes, seed))
    return samples


def summarize(samples: dict[str, dict[str, list[float]]], workloads: list[Workload], text: dict, quant: str,
              config: BenchConfig) -> BenchResult:
    """Turn raw samples (``{"candidate": {workload: [...]}, "baseline": ...}``) into the bench JSON and verdict."""
    out: dict = {"scaled_down": config.shapes.scaled_down, "shapes": config.shapes.to_dict(), "rounds": config.rounds,
                 "seed": config.seed, "gpu_profile": config.gpu.name, "quant": quant,
                 "spread_definition": "(max - min) / median of the samples",
                 "noise_definition": "half relative range of per-round paired ratios; objective: RMS over workloads",
                 "workloads": {}, "objective": None}
    compared: dict[str, stats.WorkloadAB] = {}
    for w in workloads:
        cand = samples["candidate"][w.name]
        roof = roofline_figure(w, text, quant, config.gpu, config.shapes)
        entry = {"unit": w.unit, "higher_is_better": w.higher_is_better, "candidate": summary(cand),
                 "baseline": None, "ratio": None, "noise": None, "roofline": roof,
                 "roofline_fraction": fraction(w, summary(cand)["median"], roof)}
        if "baseline" in samples:
            ab = stats.compare(cand, samples["baseline"][w.name], w.higher_is_better)
            compared[w.name] = ab
            entry |= {"baseline": summary(samples["baseline"][w.name]), "ratio": ab.ratio, "noise": ab.noise,
                      "ratios": ab.ratios, "baseline_roofline_fraction": fraction(w, summary(samples["baseline"][w.name])["median"], roof)}
        out["workloads"][w.name] = entry
    if not compared:
        return BenchResult(out, True)
    obj = stats.objective(compared)
    out["objective"] = obj.to_dict()
    return BenchResult(out, True)


def bench_single(engine_dir: str | Path, checkpoint_dir: str | Path, config: BenchConfig) -> dict:
    """Measure one engine alone (no A/B): warm, then ``config.rounds`` samples of each workload.

    Returns:
        ``{workload: {"unit", "higher_is_better", "median", "spread", "samples", "roofline", "roofline_fraction"}}``.

    Raises:
        harness.workloads.BenchError: the engine broke a workload's rules.
    """
    text, quant = model_facts(checkpoint_dir)
    runner = load_runner("engine", engine_dir, checkpoint_dir, config, text["vocab_size"])
    out = {}
    for wi, w in enumerate(parse_workloads(config.workloads)):
        name = w.name
        for i in range(config.warmup):
            measure(w, runner, config.shapes, seed=-1 - i)
        samples = [measure(w, runner, config.shapes, seed=config.seed * 1000 + 10 * r + wi) for r in range(config.rounds)]
        roof = roofline_figure(w, text, quant, config.gpu, config.shapes)
        s = summary(samples)
        out[name] = {"unit": w.unit, "higher_is_better": w.higher_is_better, **s, "roofline": roof,
                     "roofline_fraction": fraction(w, s["median"], roof)}
    return out


#: Fewest first tokens compared, and the least share that must agree, for the A/B output check.
#: honest engines that both passed parity disagree only on rare near-ties; at 0.5 an engine that skipped
#: decode for bench-shaped calls and answered 1-token calls blindly got through (5 of 7 agreeing)
MIN_COMPARED, MIN_AGREEMENT = 4, 0.9


def check_same_outputs(runners: list[Runner]) -> None:
    """Check that candidate and baseline produced the same first token on the prompts both were timed on.

    Both passed parity, so their greedy first tokens agree up to rare near-ties; an engine that
    computes something else when it is being benchmarked (skips layers for bench-shaped calls)
    agrees by chance only (about 1 / vocab).

    Raises:
        harness.workloads.BenchError: fewer than ``MIN_AGREEMENT`` of at least ``MIN_COMPARED``
            shared first tokens agree.
    """
    logs = [getattr(r, "first_tokens", None) for r in runners]
    if len(runners) < 2 or any(log is None for log in logs):
        return
    shared = logs[0].keys() & logs[1].keys()
    if len(shared) < MIN_COMPARED:
        return
    agree = sum(logs[0][k] == logs[1][k] for k in shared)
    if agree < MIN_AGREEMENT * len(shared):
        raise BenchError(
            f"{runners[0].name} and {runners[1].name} disagree on the first greedy token of {len(shared) - agree} of "
            f"{len(shared)} bench prompts: the engine computes something else when benchmarked than under parity"
        )

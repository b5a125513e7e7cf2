"""The gate's bench stage: baseline and candidate engines timed A/B, each in its own worker process.

Method (docs/BENCHMARKS.md): start one worker per engine (``harness.worker``: private copies,
identically shaped paths, so neither can tell its role), load both, warm each on every selected
workload, then run ``rounds`` rounds; in each round every workload is measured on both engines
back to back with the same prompts, the order alternating from round to round (AB, BA, AB, ...)
so slow drift charges both alike, and the order of the workloads drawn afresh per round from the
secret prompt seed (an engine cannot tell decode-bs1's first-token call from ttft's by its place in
the sequence); decode-bs1's t_1 is floored by the same engine's same-prompt-length ttft call of the round (the
same shape: a padded t_1 would shrink t_N - t_1 and inflate the figure); with two rounds or more the
rounds are split over two sessions of fresh workers, the candidate started, warmed and timed first in one and
the baseline in the other (``sessions``), so no place in the order tells an engine its role; the idle engine's worker is paused (SIGSTOP) while the other is
timed, so nothing it left running can steal time from it. Prompts are drawn in the judge from the seed mixed with a
secret nonce and sent after ``load`` returned. The clock runs in the judge: it starts before a
request is sent and stops when the outputs arrived as Python ints. Every output is then checked
in full against the baseline's (``harness.bench_outputs``). Each figure states its roofline
fraction (``harness.roofline``). Statistics and the objective are in ``harness.stats``.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from harness import stats
from harness.bench_outputs import OutputCheck, check_outputs
from harness.bench_replay import ReplayCheck, check_replay
from harness.nonce import prompt_seed
from harness.worker import EngineError, Worker, WorkerLimits
from harness.worker_procs import paused
from harness.workload_roofline import roofline_figure
from harness.workloads import (
    CPU_SHAPES, FULL_SHAPES, BenchError, Capacity, Runner, Shapes, Workload, WorkerRunner, capacity, measure, parse_workloads,
)
from metainfer.targets import GpuProfile


@dataclass(frozen=True)
class BenchConfig:
    """What the bench stage runs.

    Attributes:
        workloads: names from ``harness.workloads.WORKLOADS``, in order.
        rounds: A/B rounds (samples per engine per workload), at least 1; 5+ for a usable noise bar.
        seed: seeds the prompts (round r, workload w draw from ``s*1000 + 10*r + w``, s = ``prompt_seed(seed, nonce)``).
        nonce: the secret nonce mixed into ``seed`` (``harness.nonce``); None: the seed alone.
        limits: worker call limits; isolation: worker isolation level (None: the strongest that works).
        shapes: ``FULL_SHAPES`` on a GPU, ``CPU_SHAPES`` scaled down.
        device: ``"cuda"`` or ``"cpu"``.
        gpu: the GPU profile for roofline figures.
        length_jitter: each sample's prompt lengths drawn in P ± ``floor(P * length_jitter)`` (``harness.workload_draws``;
            the gate's bench, so that a path keyed to one exact shape wins no round); 0: every prompt exactly P.
        path_noise: the candidate's own path noise measured by parity (its largest decode consistency figure), which
            bounds the replay check (``harness.bench_replay``); None: that check is skipped and says so.
        load_capacity: the ``engine.load`` capacity to ask for at least (the gate's, ``gate_stages.gate_capacity``: the
            same for every stage); each load asks for its union with the workloads' ``capacity``. None: theirs alone.
    """

    workloads: list[str]
    rounds: int
    seed: int
    shapes: Shapes
    device: str
    gpu: GpuProfile
    warmup: int = 1
    nonce: int | None = None
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    isolation: str | None = None
    load_capacity: Capacity | None = None
    length_jitter: float = 0.0
    path_noise: float | None = None

    @property
    def prompt_seed(self) -> int:
        """The seed the bench prompts are drawn from (``harness.nonce.prompt_seed``)."""
        return prompt_seed(self.seed, self.nonce)


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


def fraction(workload: Workload, measured: float, roof: float) -> float:
    """Fraction of roofline reached: measured/roofline for throughput, roofline/measured for latency."""
    return measured / roof if workload.higher_is_better else roof / measured


def summary(samples: list[float]) -> dict:
    """``{"median", "spread", "samples"}`` of one engine's samples (spread = (max − min)/median)."""
    import statistics

    return {"median": statistics.median(samples), "spread": stats.spread(samples), "samples": samples}


def start_runner(name: str, engine_dir: str | Path, checkpoint_dir: str | Path, config: BenchConfig, vocab: int,
                 deadline: float | None = None) -> tuple[WorkerRunner, float]:
    """Start one engine's worker and send it ``load`` (cache sized by ``harness.workloads.capacity``, united with
    ``config.load_capacity``); returns the runner
    and the load's deadline, for :func:`finish_load` (two engines load side by side)."""
    worker = Worker("engine", engine_dir=engine_dir, limits=config.limits, isolation=config.isolation)
    worker.stage_deadline = deadline
    cap = capacity(parse_workloads(config.workloads), config.shapes, config.length_jitter).union(config.load_capacity)
    try:
        import torch

        due = worker.send("engine.load", timeout=config.limits.load_s, engine_dir=str(worker.engine_dir),
                          checkpoint=str(Path(checkpoint_dir).resolve()), device=config.device,
                          max_batch=cap.max_batch, max_seq_len=cap.max_seq_len, threads=torch.get_num_threads())
    except BaseException:
        worker.close()
        raise
    return WorkerRunner(name, worker, vocab), due


def finish_load(runner: WorkerRunner, due: float) -> None:
    """Wait for ``load`` to return. Raises ``BenchError`` when it raised, ``WorkerFailure`` when the worker overran or died."""
    try:
        runner.worker.receive("engine.load", due)
    except EngineError as err:
        raise BenchError(f"{runner.name}: load raised {err}") from None


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
    deadline = time.monotonic() + config.limits.stage_s
    dirs = {"candidate": candidate_dir, "baseline": baseline_dir}
    samples: dict[str, dict[str, list[float]]] = {}
    checks: list[OutputCheck] = []
    replay_calls: list = []  # every timed call of the candidate, over every session, for the replay check
    for names, first_round, n in sessions(config.rounds, baseline_dir is not None):
        runners: list[WorkerRunner] = []
        try:
            pending = []
            for name in names:  # started, loaded, warmed and (in its first round) timed in this order
                pending.append(start_runner(name, dirs[name], checkpoint_dir, config, vocab, deadline))
                runners.append(pending[-1][0])
            for runner, due in pending:
                finish_load(runner, due)
            got = _ab_rounds(runners, workloads, config, first_round, n)
            by_name = {r.name: r for r in runners}
            if len(runners) == 2:
                checks.append(check_outputs(by_name["candidate"], by_name["baseline"]))
            replay_calls += by_name["candidate"].batches
        finally:
            for r in runners:
                r.worker.close()
        for name, per in got.items():
            for w, xs in per.items():
                samples.setdefault(name, {}).setdefault(w, []).extend(xs)
    replay = _replay(candidate_dir, checkpoint_dir, config, vocab, replay_calls, deadline)
    res = summarize(samples, workloads, text, quant, config)
    res.data["output_check"] = merge_checks(checks).to_dict() if checks else None
    res.data["replay_check"] = replay.to_dict()
    res.data["sessions"] = [{"order": list(names), "rounds": n} for names, _, n in sessions(config.rounds, baseline_dir is not None)]
    return res


def _replay(candidate_dir, checkpoint_dir, config: BenchConfig, vocab: int, calls: list, deadline: float) -> ReplayCheck:
    """The replay check (``harness.bench_replay``) of ``calls`` in a fresh worker of the candidate, loaded as every
    bench worker is; skipped (and said so) without parity's path noise. Raises ``BenchError`` as ``check_replay``."""
    if config.path_noise is None or not calls:
        return check_replay(None, [], config.path_noise)
    runner, due = start_runner("candidate", candidate_dir, checkpoint_dir, config, vocab, deadline)
    try:
        finish_load(runner, due)
        return check_replay(runner, calls, config.path_noise)
    finally:
        runner.worker.close()


def sessions(rounds: int, ab: bool) -> list[tuple[tuple[str, ...], int, int]]:
    """The bench's sessions: ``(engine names in start order, first round, rounds)``. An A/B bench of 2+ rounds runs
    two sessions with fresh workers, the candidate first in one and the baseline first in the other, so whatever an
    engine could read off its place in the order (started, loaded, warmed or timed first: ``role_from_warmup_gap``
    told the baseline by the gap between its load and its first call) falls on each role once; an engine that
    sleeps when it takes itself for the baseline then loses the other session's rounds."""
    if not ab:
        return [(("candidate",), 0, rounds)]
    first = (rounds + 1) // 2
    plan = [(("candidate", "baseline"), 0, first)]
    if rounds > first:
        plan.append((("baseline", "candidate"), first, rounds - first))
    return plan


def merge_checks(checks: list[OutputCheck]) -> OutputCheck:
    """The sum of the sessions' output checks (``worst_gap_std`` the largest)."""
    out = OutputCheck()
    for c in checks:
        for f in fields(OutputCheck):
            a, b = getattr(out, f.name), getattr(c, f.name)
            setattr(out, f.name, max(a, b) if f.name == "worst_gap_std" else a + b)
    return out


class _Recorder:
    """A ``Runner`` passing calls through to ``runner`` and recording ``(prompts, max_tokens, seconds)`` of each
    ``generate`` (the seconds of the same span ``harness.workloads`` times, minus its length checks)."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner, self.calls = runner, []
        self.name, self.vocab_size, self.device, self.outputs = runner.name, runner.vocab_size, runner.device, runner.outputs
        self.batches = runner.batches

    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        t0 = time.perf_counter()
        out = self.runner.generate(prompts, max_tokens)
        self.calls.append((len(prompts), max_tokens, time.perf_counter() - t0))
        return out


def floored_decode(figure: float, calls: list[tuple[int, int, float]], ttft_s: float | None, n: int) -> float:
    """decode-bs1's figure ``(n - 1) / (t_N - t_1)`` recomputed with ``t_1 = min(t_1, ttft_s)``: ``calls`` are the
    recorded calls of its measurement (the last two: ``(1, 1, t_1)``, ``(1, n, t_N)``), ``ttft_s`` the same engine's
    ttft call of the same round (the same shape), None when not measured. Never above ``figure``."""
    if ttft_s is None or len(calls) < 2 or calls[-2][:2] != (1, 1) or calls[-1][:2] != (1, n):
        return figure
    t1, tn = calls[-2][2], calls[-1][2]
    floor = min(t1, ttft_s)
    return min(figure, (n - 1) / (tn - floor)) if tn > floor else figure


def _ab_rounds(runners: list[WorkerRunner], workloads: list[Workload], config: BenchConfig, first_round: int = 0,
               rounds: int | None = None) -> dict[str, dict[str, list[float]]]:
    """Warm every runner, then rounds ``first_round ..`` (``rounds`` of them, default ``config.rounds``), alternating
    which runner goes first (``runners[0]`` in even rounds); ``{runner: {workload: [one sample per round]}}``."""
    def timed(runner: WorkerRunner, w: Workload, seed: int, length_seed: int | None = None) -> tuple[float, list]:
        rec = _Recorder(runner)
        with paused([r.worker for r in runners if r is not runner]):  # the idle engine cannot steal time
            return measure(w, rec, config.shapes, seed, jitter=config.length_jitter, length_seed=length_seed), rec.calls

    shuffle = random.Random(config.prompt_seed * 7919 + 17 + first_round)  # the secret order of the workloads, per round
    for runner in runners:
        for i in range(config.warmup):
            for w in shuffle.sample(workloads, len(workloads)):
                timed(runner, w, -1 - i)
    samples: dict[str, dict[str, list[float]]] = {r.name: {w.name: [] for w in workloads} for r in runners}
    index = {w.name: wi for wi, w in enumerate(workloads)}
    for rnd in range(first_round, first_round + (config.rounds if rounds is None else rounds)):
        order = runners if (rnd - first_round) % 2 == 0 else runners[::-1]  # AB, BA, AB, ...
        got: dict[str, dict[str, tuple[float, list]]] = {r.name: {} for r in runners}
        for w in shuffle.sample(workloads, len(workloads)):
            seed = config.prompt_seed * 1000 + 10 * rnd + index[w.name]  # same prompts for both engines of this round
            for runner in order:  # lengths per round, not per workload: ttft and decode-bs1 of one P share theirs
                got[runner.name][w.name] = timed(runner, w, seed, config.prompt_seed * 1000 + 10 * rnd)
        for name, per in got.items():
            for w in workloads:
                figure, calls = per[w.name]
                if w.timing == "decode":  # t_1 floored by a same-shaped ttft call of this engine and round
                    own = w.at(config.shapes)
                    same = [per[o.name][1][-1][2] for o in workloads
                            if o.timing == "ttft" and o.at(config.shapes).prompt == own.prompt and per[o.name][1]]
                    figure = floored_decode(figure, calls, min(same) if same else None, own.output)
                samples[name][w.name].append(figure)
    return samples


def summarize(samples: dict[str, dict[str, list[float]]], workloads: list[Workload], text: dict, quant: str,
              config: BenchConfig) -> BenchResult:
    """Turn raw samples (``{"candidate": {workload: [...]}, "baseline": ...}``) into the bench JSON and verdict."""
    out: dict = {"scaled_down": config.shapes.scaled_down, "shapes": config.shapes.to_dict(), "rounds": config.rounds,
                 "seed": config.seed, "prompt_nonce": config.nonce, "length_jitter": config.length_jitter, "gpu_profile": config.gpu.name, "quant": quant,
                 "spread_definition": "(max - min) / median of the samples",
                 "noise_definition": "half relative range of per-round paired ratios; objective: RMS over workloads",
                 "workloads": {}, "objective": None}
    compared: dict[str, stats.WorkloadAB] = {}
    for w in workloads:
        cand = samples["candidate"][w.name]
        roof = roofline_figure(w, text, quant, config.gpu, config.shapes)
        entry = {"unit": w.unit, "higher_is_better": w.higher_is_better, "shapes": w.at(config.shapes).to_dict(), "candidate": summary(cand),
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
    runner, due = start_runner("engine", engine_dir, checkpoint_dir, config, text["vocab_size"],
                               time.monotonic() + config.limits.stage_s)
    out = {}
    try:
        finish_load(runner, due)
        for wi, w in enumerate(parse_workloads(config.workloads)):
            for i in range(config.warmup):
                measure(w, runner, config.shapes, seed=-1 - i)
            samples = [measure(w, runner, config.shapes, seed=config.prompt_seed * 1000 + 10 * r + wi) for r in range(config.rounds)]
            roof = roofline_figure(w, text, quant, config.gpu, config.shapes)
            s = summary(samples)
            out[w.name] = {"unit": w.unit, "higher_is_better": w.higher_is_better, "shapes": w.at(config.shapes).to_dict(), **s, "roofline": roof,
                           "roofline_fraction": fraction(w, s["median"], roof)}
    finally:
        runner.worker.close()
    return out

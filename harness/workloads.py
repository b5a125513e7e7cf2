"""The three benchmark workloads (DESIGN.md, "Benchmark workloads") and how one sample is timed.

| name | what | figure |
|---|---|---|
| ``ttft`` | one request, P-token prompt, 1 output token | ms (lower is better) |
| ``decode-bs1`` | one request, P-token prompt, N output tokens | (N − 1) / (t_N − t_1) tok/s |
| ``conc32`` | S concurrent requests, P in / N out, closed loop | S·N / t aggregate tok/s |

Full shapes: P = 256, N = 256, S = 32. On the CPU they run scaled down (``CPU_SHAPES``) and
the result says so. Prompts are random token ids drawn per sample from a seeded generator
(the same prompts for both engines of an A/B round); outputs are forced to full length
(``ignore_eos=True``, greedy) and their lengths checked, so an engine cannot look fast by
stopping early. ``decode-bs1`` times two requests with different prompts (1 output token,
then N) so a prefix cache cannot turn the second prefill into a free one.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class Shapes:
    """Workload shapes: ``prompt`` tokens P, ``output`` tokens N, concurrent ``streams`` S; ``scaled_down`` on the CPU."""

    prompt: int = 256
    output: int = 256
    streams: int = 32
    scaled_down: bool = False

    def to_dict(self) -> dict:
        """JSON form recorded beside every figure."""
        return asdict(self)


FULL_SHAPES = Shapes()
CPU_SHAPES = Shapes(prompt=16, output=8, streams=4, scaled_down=True)


@dataclass(frozen=True)
class Workload:
    """One workload: its ``name``, figure ``unit`` and direction."""

    name: str
    unit: str
    higher_is_better: bool
    what: str


WORKLOADS: dict[str, Workload] = {
    "ttft": Workload("ttft", "ms", False, "one request, P-token prompt, 1 output token: median time to first token"),
    "decode-bs1": Workload("decode-bs1", "tok/s", True, "one request, P-token prompt, N output tokens: (N-1)/(t_N - t_1)"),
    "conc32": Workload("conc32", "tok/s", True, "S concurrent requests, P in / N out, closed loop: aggregate output tok/s"),
}


class BenchError(RuntimeError):
    """A runner broke a workload's rules (wrong output count or length, token ids out of range)."""


class Runner(Protocol):
    """What a workload drives: our engine or a peer (HF, vLLM)."""

    name: str
    vocab_size: int
    device: torch.device

    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """Greedy, EOS ignored: exactly ``max_tokens`` output ids per prompt."""


def parse_workloads(names: str | list[str]) -> list[Workload]:
    """``"ttft,decode-bs1"`` -> workloads, in the given order.

    Raises:
        ValueError: an unknown name (the message lists the known ones) or an empty list.
    """
    items = [n.strip() for n in (names.split(",") if isinstance(names, str) else names) if n.strip()]
    if not items:
        raise ValueError(f"no workloads selected; choose from {', '.join(WORKLOADS)}")
    unknown = [n for n in items if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    return [WORKLOADS[n] for n in items]


def draw_prompts(seed: int, count: int, length: int, vocab_size: int) -> list[list[int]]:
    """``count`` prompts of ``length`` random token ids in [0, vocab_size), from ``random.Random(seed)``."""
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(length)] for _ in range(count)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(runner: Runner, prompts: list[list[int]], max_tokens: int) -> float:
    """Seconds for one ``generate`` call, on the judge's clock; checks the outputs.

    For a worker runner the clock starts before the request is sent and stops after the outputs
    arrived in the judge as Python ints (the worker synchronises CUDA before it replies), so no
    part of the work can happen after the clock stopped.
    """
    _sync(runner.device)
    t0 = time.perf_counter()
    out = runner.generate(prompts, max_tokens)
    _sync(runner.device)
    dt = time.perf_counter() - t0
    if len(out) != len(prompts) or any(len(o) != max_tokens for o in out):
        lens = [len(o) for o in out]
        raise BenchError(f"{runner.name}: asked for {len(prompts)} x {max_tokens} tokens (ignore_eos), got lengths {lens[:8]}")
    if any(not isinstance(t, int) or not 0 <= t < runner.vocab_size for o in out for t in o):
        raise BenchError(f"{runner.name}: output token ids outside [0, {runner.vocab_size})")
    log = getattr(runner, "outputs", None)
    if log is not None:  # for the A/B check that both engines computed the same thing (harness.bench_outputs)
        for prompt, o in zip(prompts, out):
            log[(tuple(prompt), max_tokens)] = list(o)
    return dt


def measure(workload: Workload, runner: Runner, shapes: Shapes, seed: int) -> float:
    """One sample of ``workload`` on ``runner``: ms for ``ttft``, tok/s for the others.

    Raises:
        BenchError: the runner returned the wrong number or length of outputs, or
            ``decode-bs1`` measured t_N <= t_1 in three attempts (a broken or cheating engine).
    """
    p, n, s, v = shapes.prompt, shapes.output, shapes.streams, runner.vocab_size
    if workload.name == "ttft":
        return 1e3 * _timed(runner, draw_prompts(seed, 1, p, v), 1)
    if workload.name == "decode-bs1":
        for attempt in range(3):  # a noisy machine can invert one pair; three inverted pairs is the engine
            first, full = draw_prompts(seed + 7919 * attempt, 2, p, v)
            t1 = _timed(runner, [first], 1)
            tn = _timed(runner, [full], n)
            if tn > t1:
                return (n - 1) / (tn - t1)
        raise BenchError(f"{runner.name}: {n} tokens took {tn:.4f}s, not more than 1 token ({t1:.4f}s), three times")
    if workload.name == "conc32":
        return s * n / _timed(runner, draw_prompts(seed, s, p, v), n)
    raise ValueError(f"unknown workload {workload.name!r}; known: {', '.join(WORKLOADS)}")


class WorkerRunner:
    """An engine in its worker process (``harness.worker``) behind the ``Runner`` protocol: greedy
    ``generate`` of exactly ``max_tokens`` ids per prompt, EOS ignored.

    Attributes:
        outputs: ``(prompt, max_tokens) -> output ids`` of every timed call, for the A/B output check.
    """

    def __init__(self, name: str, worker, vocab_size: int) -> None:
        self.name, self.worker, self.vocab_size = name, worker, vocab_size
        self.device = torch.device("cpu")  # the judge's side: the worker synchronises its own device
        self.outputs: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """One ``engine.generate`` call in the worker; the reply is plain ints."""
        out = self.worker.call("engine.generate", prompts=prompts, max_tokens=max_tokens)
        if not isinstance(out, list) or not all(isinstance(o, list) for o in out):
            raise BenchError(f"{self.name}: generate returned {type(out).__name__}, not a list of token lists")
        return out

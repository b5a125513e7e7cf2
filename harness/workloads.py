"""The benchmark workloads (DESIGN.md, "Benchmark workloads"), each with its own shape, and how one sample is timed.

| name | timing | figure | full P / N / S | CPU P / N / S |
|---|---|---|---|---|
| ``ttft`` | ttft | time of one ``generate`` (1 output token), ms (lower is better) | 256 / 1 / 1 | 16 / 1 / 1 |
| ``decode-bs1`` | decode | (N − 1) / (t_N − t_1), tok/s | 256 / 256 / 1 | 16 / 8 / 1 |
| ``conc32`` | conc | S·N / t, aggregate output tok/s, closed loop | 256 / 256 / 32 | 16 / 8 / 4 |
| ``conc64`` | conc | as conc32 | 256 / 256 / 64 | 16 / 8 / 6 |
| ``conc128`` | conc | as conc32 | 256 / 256 / 128 | 16 / 8 / 8 |
| ``ttft-2k`` | ttft | as ttft, ms | 2048 / 1 / 1 | 32 / 1 / 1 |
| ``ttft-8k`` | ttft | as ttft, ms | 8192 / 1 / 1 | 64 / 1 / 1 |
| ``prefill-16k`` | prefill | P / t of one ``generate`` (1 output token), prompt tok/s | 16000 / 1 / 1 | 96 / 1 / 1 |

P = prompt tokens, N = output tokens, S = concurrent streams. A run is at one scale: full size
(a GPU) or scaled down (the CPU, ``scaled_down: true``); ``FULL_SHAPES`` / ``CPU_SHAPES`` name the
scale (and are the shapes of ``conc32``, the envelope of the first three workloads) and
``Workload.at`` gives a workload's own shape at it. Prompts are random token ids drawn per
sample from a seeded generator (the same prompts for both engines of an A/B round), their lengths exactly P
or, in the gate's bench, drawn around P (``harness.workload_draws``); outputs are
forced to full length (``ignore_eos=True``, greedy) and their lengths checked, so an engine
cannot look fast by stopping early. ``decode-bs1`` times two requests with different prompts
(1 output token, then N) so a prefix cache cannot turn the second prefill into a free one.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import asdict, dataclass
from typing import Callable, Protocol

import torch

from harness.workload_draws import draw_lengths, draw_prompts, length_spread


@dataclass(frozen=True)
class Shapes:
    """One workload shape: ``prompt`` tokens P, ``output`` tokens N, concurrent ``streams`` S; ``scaled_down`` on the CPU."""

    prompt: int = 256
    output: int = 256
    streams: int = 32
    scaled_down: bool = False

    def to_dict(self) -> dict:
        """JSON form recorded beside every figure."""
        return asdict(self)


FULL_SHAPES = Shapes()
CPU_SHAPES = Shapes(prompt=16, output=8, streams=4, scaled_down=True)

#: timing methods (``measure``): what one sample times and which figure it yields
TIMINGS = {
    "ttft": "one request, P-token prompt, 1 output token: ms of one generate call",
    "decode": "one request, P-token prompt: (N-1)/(t_N - t_1) output tok/s, two calls on different prompts",
    "conc": "S requests in one generate call, P in / N out, closed loop: S*N/t aggregate output tok/s",
    "prefill": "one request, P-token prompt, 1 output token: P/t prompt tok/s of one generate call",
}


@dataclass(frozen=True)
class Workload:
    """One workload: ``name``, figure ``unit`` and direction, ``timing`` (a key of ``TIMINGS``) and its own
    shapes at full size (``full``) and on the CPU (``cpu``).

    Raises:
        ValueError: an unknown timing, or shapes the timing cannot run (ttft/prefill: N = S = 1;
            decode: S = 1, N >= 2; every P, N, S >= 1; ``cpu`` scaled down, ``full`` not).
    """

    name: str
    unit: str
    higher_is_better: bool
    what: str
    timing: str
    full: Shapes
    cpu: Shapes

    def __post_init__(self) -> None:
        if self.timing not in TIMINGS:
            raise ValueError(f"workload {self.name}: unknown timing {self.timing!r}; known: {', '.join(TIMINGS)}")
        for s, down in ((self.full, False), (self.cpu, True)):
            if min(s.prompt, s.output, s.streams) < 1 or s.scaled_down != down:
                raise ValueError(f"workload {self.name}: bad shape {s}")
            if self.timing in ("ttft", "prefill") and (s.output, s.streams) != (1, 1):
                raise ValueError(f"workload {self.name}: {self.timing} runs one request of 1 output token, got {s}")
            if self.timing == "decode" and (s.streams != 1 or s.output < 2):
                raise ValueError(f"workload {self.name}: decode runs one request of at least 2 output tokens, got {s}")

    def at(self, scale: Shapes) -> Shapes:
        """This workload's own shape at the scale of ``scale``: ``cpu`` when ``scale.scaled_down``, else ``full``.

        ``scale`` is ``FULL_SHAPES`` or ``CPU_SHAPES`` (what ``harness.bench.shapes_for`` returns) or
        one of this workload's own two shapes.

        Raises:
            ValueError: any other shape (a workload's shape is fixed; its numbers would be ignored).
        """
        if scale not in (FULL_SHAPES, CPU_SHAPES, self.full, self.cpu):
            raise ValueError(f"workload {self.name} runs its own shapes ({self.full} / {self.cpu}); "
                             f"pass FULL_SHAPES or CPU_SHAPES to pick the scale, not {scale}")
        return self.cpu if scale.scaled_down else self.full


def _cpu(prompt: int, output: int, streams: int) -> Shapes:
    return Shapes(prompt, output, streams, scaled_down=True)


def _conc(streams: int, cpu_streams: int) -> Workload:
    return Workload(f"conc{streams}", "tok/s", True, f"{streams} concurrent requests, 256 in / 256 out, closed loop: "
                    "aggregate output tok/s", "conc", Shapes(256, 256, streams), _cpu(16, 8, cpu_streams))


def _ttft(name: str, prompt: int, cpu_prompt: int) -> Workload:
    return Workload(name, "ms", False, f"one request, {prompt}-token prompt, 1 output token: median time to first token",
                    "ttft", Shapes(prompt, 1, 1), _cpu(cpu_prompt, 1, 1))


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    _ttft("ttft", 256, 16),
    Workload("decode-bs1", "tok/s", True, "one request, 256-token prompt, 256 output tokens: (N-1)/(t_N - t_1)",
             "decode", Shapes(256, 256, 1), _cpu(16, 8, 1)),
    _conc(32, 4),  # = FULL_SHAPES / CPU_SHAPES
    _conc(64, 6),
    _conc(128, 8),
    _ttft("ttft-2k", 2048, 32),
    _ttft("ttft-8k", 8192, 64),
    Workload("prefill-16k", "prompt tok/s", True, "one request, 16,000-token prompt, 1 output token: prompt tokens/s",
             "prefill", Shapes(16000, 1, 1), _cpu(96, 1, 1)),
)}


@dataclass(frozen=True)
class Capacity:
    """What an engine must hold to run a set of workloads: ``max_batch`` slots of ``max_seq_len`` tokens."""

    max_batch: int
    max_seq_len: int

    def union(self, *others: "Capacity | None") -> "Capacity":
        """The capacity that holds this one and each of ``others`` (None skipped): the max of each field."""
        caps = [self, *(o for o in others if o is not None)]
        return Capacity(max(c.max_batch for c in caps), max(c.max_seq_len for c in caps))


#: What ``metainfer serve`` loads an engine with by default (``--max-batch``, ``--max-seq-len``). Every gate loads at
#: least this much, so an engine cannot tell the judge from a server by its load arguments, and parity's wide run
#: decodes every batch size a default server can (the red team's ``decode_batch_over_capacity`` cut decode batches
#: above the gate's 11 slots).
SERVE_CAPACITY = Capacity(64, 4096)


def capacity(workloads: list[Workload], scale: Shapes, jitter: float = 0.0) -> Capacity:
    """The ``engine.load`` capacity for ``workloads`` at ``scale``: max S + 1 slots, max(P + N) + 8 tokens each, P at
    the top of its drawn range when ``jitter`` > 0 (``workload_draws.length_spread``).

    Raises:
        ValueError: no workloads.
    """
    if not workloads:
        raise ValueError("capacity of no workloads; select at least one")
    shapes = [w.at(scale) for w in workloads]
    return Capacity(max(s.streams for s in shapes) + 1,
                    max(s.prompt + length_spread(s.prompt, jitter) + s.output for s in shapes) + 8)


class BenchError(RuntimeError):
    """A runner broke a workload's rules (wrong output count or length, token ids out of range)."""


class Runner(Protocol):
    """What a workload drives: our engine or a peer (HF, vLLM)."""

    name: str
    vocab_size: int
    device: torch.device

    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """Greedy, EOS ignored: exactly ``max_tokens`` output ids per prompt."""


def longest_prompt(workloads: list[Workload], scale: Shapes) -> int:
    """The longest prompt any of ``workloads`` times at the scale of ``scale`` (``Workload.at``), in tokens; 0 for none."""
    return max((w.at(scale).prompt for w in workloads), default=0)


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
        close = [m[0] for n in unknown if (m := difflib.get_close_matches(n.lower(), list(WORKLOADS), n=1, cutoff=0.6))]
        raise ValueError(f"unknown workloads {unknown}; " + (f"did you mean {', '.join(close)}? " if close else "")
                         + f"known: {', '.join(WORKLOADS)}")
    return [WORKLOADS[n] for n in items]


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
    calls = getattr(runner, "batches", None)
    if calls is not None:  # each call whole, for the replay check (harness.bench_replay)
        calls.append(([list(p) for p in prompts], [list(o) for o in out]))
    return dt


def _time_ttft(runner: Runner, s: Shapes, seed: int, lengths: list[int]) -> float:
    return 1e3 * _timed(runner, draw_prompts(seed, 1, lengths[:1], runner.vocab_size), 1)


def _time_prefill(runner: Runner, s: Shapes, seed: int, lengths: list[int]) -> float:
    return lengths[0] / _timed(runner, draw_prompts(seed, 1, lengths[:1], runner.vocab_size), 1)


def _time_decode(runner: Runner, s: Shapes, seed: int, lengths: list[int]) -> float:
    n, v = s.output, runner.vocab_size
    for attempt in range(3):  # a noisy machine can invert one pair; three inverted pairs is the engine
        first, full = draw_prompts(seed + 7919 * attempt, 2, lengths[:1] * 2, v)  # equal lengths: equal prefills
        t1 = _timed(runner, [first], 1)
        tn = _timed(runner, [full], n)
        if tn > t1:
            return (n - 1) / (tn - t1)
    raise BenchError(f"{runner.name}: {n} tokens took {tn:.4f}s, not more than 1 token ({t1:.4f}s), three times")


def _time_conc(runner: Runner, s: Shapes, seed: int, lengths: list[int]) -> float:
    return s.streams * s.output / _timed(runner, draw_prompts(seed, s.streams, lengths, runner.vocab_size), s.output)


#: timing name -> one sample of it on a runner at a shape, from a prompt seed and the sample's S prompt lengths, in
#: the workload's unit
TIMERS: dict[str, Callable[[Runner, Shapes, int, list[int]], float]] = {
    "ttft": _time_ttft, "prefill": _time_prefill, "decode": _time_decode, "conc": _time_conc,
}


def measure(workload: Workload, runner: Runner, shapes: Shapes, seed: int, *, jitter: float = 0.0,
            length_seed: int | None = None) -> float:
    """One sample of ``workload`` on ``runner`` at its own shape for the scale of ``shapes`` (``Workload.at``),
    in the workload's unit: ms for the ttft timings, prompt tok/s for prefill, output tok/s for the others.

    ``jitter``: prompt lengths drawn in P ± ``length_spread(P, jitter)`` from ``length_seed`` (default ``seed``), one
    per stream (``workload_draws.draw_lengths``; the gate's bench, so that no fixed shape is timed); 0: exactly P.

    Raises:
        BenchError: the runner returned the wrong number or length of outputs, or
            ``decode-bs1`` measured t_N <= t_1 in three attempts (a broken or cheating engine).
        ValueError: ``shapes`` names no scale of this workload (``Workload.at``), or ``jitter`` is outside [0, 0.5].
    """
    s = workload.at(shapes)
    lengths = draw_lengths(seed if length_seed is None else length_seed, s.prompt, s.streams, jitter)
    return TIMERS[workload.timing](runner, s, seed, lengths)


class WorkerRunner:
    """An engine in its worker process (``harness.worker``) behind the ``Runner`` protocol: greedy
    ``generate`` of exactly ``max_tokens`` ids per prompt, EOS ignored.

    Attributes:
        outputs: ``(prompt, max_tokens) -> output ids`` of every timed call, for the A/B output check.
        batches: every timed call's ``(prompts, outputs)``, for the replay check (``harness.bench_replay``).
    """

    def __init__(self, name: str, worker, vocab_size: int) -> None:
        self.name, self.worker, self.vocab_size = name, worker, vocab_size
        self.device = torch.device("cpu")  # the judge's side: the worker synchronises its own device
        self.outputs: dict[tuple[tuple[int, ...], int], list[int]] = {}
        self.batches: list[tuple[list[list[int]], list[list[int]]]] = []

    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """One ``engine.generate`` call in the worker; the reply is plain ints."""
        out = self.worker.call("engine.generate", prompts=prompts, max_tokens=max_tokens)
        if not isinstance(out, list) or not all(isinstance(o, list) for o in out):
            raise BenchError(f"{self.name}: generate returned {type(out).__name__}, not a list of token lists")
        return out

"""The gate's profile stage: where one prefill and one decode step of the candidate spend their time, by op.

The candidate runs in a worker of its own (``harness.worker``); its ``engine.profile`` op
(``harness.profile_capture``) runs torch.profiler around one prefill of a P-token prompt and one
decode step of B sequences with C tokens cached, each after an unprofiled warm-up, and returns
per raw kernel name its time and calls. The judge groups names into ops (``harness.profile_groups``)
and, on a GPU, sets each against the roofline (``harness.roofline``): roofline time / measured
time, for a phase's whole step and for the ops whose traffic roofline.py separates
(``profile_groups.DECODE_ROOFLINE_BASIS``); every other op's ``roofline_fraction`` is null, and all
of them are null on the CPU. Times are kernel (device) time on a GPU, operator CPU self time on
the CPU, in ms per step. Prompts are random ids drawn in the judge from the gate seed and nonce.

The stage is advisory: it never decides acceptance (``harness.gate`` records a failure and stays green),
and its figures come out of the engine's own process, so an engine could shape them: read them as
the engine's account of itself, not as a measurement the judge vouches for (the bench's clock is that).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import roofline
from harness.profile_groups import DECODE_ROOFLINE_BASIS, DECODE_WEIGHT_OPS, GROUP_NAMES, group_of
from harness.worker import EngineError, Worker, WorkerLimits
from harness.workloads import Capacity
from metainfer.targets import GpuProfile, get_quant

PHASES = ("decode", "prefill")
ROOFLINE_NOTE = ("roofline_fraction = roofline time (harness.roofline: max(bytes / bandwidth, FLOPs / bf16 rate)) / measured "
                 "kernel time. Per phase: the whole step. Per op only where roofline.py separates that op's traffic: "
                 + ", ".join(f"{op} (decode: {basis})" for op, basis in DECODE_ROOFLINE_BASIS.items())
                 + "; null for every other op (roofline.py counts all linear weights, and prefill FLOPs, as one sum) "
                 "and everywhere on the CPU. Decode's matmul figure: the weight bytes over the summed time of "
                 + ", ".join(DECODE_WEIGHT_OPS) + ".")


def _count(x: float) -> int | float:
    """A call count as an int when it is whole (one step profiled), else the float mean per step."""
    return int(x) if float(x).is_integer() else x


class ProfileError(ValueError):
    """The profile could not be taken or its data is unusable (the message names the kernel or the phase)."""


@dataclass(frozen=True)
class ProfileConfig:
    """What the profile stage runs.

    Attributes:
        prompt: P, tokens of the prefill phase's prompt.
        batch: B, sequences of the decode step.
        context: C, tokens each decode sequence has cached before its warm-up step(s).
        seed, nonce: prompts are drawn from ``harness.nonce.prompt_seed(seed, nonce)``.
        device: ``cuda`` or ``cpu``; gpu: the GPU profile for roofline figures (unused on the CPU).
        warmup: unprofiled runs of each phase first (compile, autotune, graph capture).
        limits: worker call limits; isolation: worker isolation (None: the strongest that works).
        limit_s: wall-clock limit of the whole stage, load included, seconds.
        load_capacity: the ``engine.load`` capacity to ask for at least (the gate's, ``gate_stages.gate_capacity``);
            the load asks for its union with :meth:`own_capacity`. None: that alone.
    """

    prompt: int
    batch: int
    context: int
    seed: int
    device: str
    gpu: GpuProfile
    nonce: int | None = None
    warmup: int = 1
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    isolation: str | None = None
    limit_s: float = 600.0
    load_capacity: Capacity | None = None

    def __post_init__(self) -> None:
        if self.prompt < 1 or self.batch < 1 or self.context < 1 or self.warmup < 0 or not self.limit_s > 0:
            raise ProfileError(f"profile shapes must be positive (prompt {self.prompt}, batch {self.batch}, context "
                               f"{self.context}, warmup {self.warmup} >= 0, limit {self.limit_s} s)")

    def own_capacity(self) -> Capacity:
        """What the profile's own runs need: B + 1 slots (B decode sequences and the prefill's prompt) of
        max(P, C + warm-up + 1) + 8 tokens."""
        return Capacity(self.batch + 1, max(self.prompt, self.context + self.warmup + 1) + 8)


@dataclass(frozen=True)
class KernelTime:
    """One raw kernel (GPU) or operator (CPU) name: ``ms`` and ``calls`` per step."""

    name: str
    ms: float
    calls: float


@dataclass(frozen=True)
class OpTime:
    """One op group of a phase: ``ms`` and ``calls`` per step, distinct kernel names, roofline fraction (or None)."""

    op: str
    ms: float
    calls: float
    kernels: int
    roofline_fraction: float | None = None
    roofline_basis: str | None = None

    def to_json(self) -> dict:
        """``{"op", "ms", "calls", "kernels", "roofline_fraction", "roofline_basis"}``."""
        return {"op": self.op, "ms": self.ms, "calls": _count(self.calls), "kernels": self.kernels,
                "roofline_fraction": self.roofline_fraction, "roofline_basis": self.roofline_basis}


@dataclass(frozen=True)
class MatmulRoofline:
    """Decode's weight-reading op groups together (``ops``): their ``ms`` per step against ``roofline_ms``, the step's
    weight bytes at full bandwidth; ``roofline_fraction`` = roofline_ms / ms (None when they took no time)."""

    ops: tuple[str, ...]
    ms: float
    roofline_ms: float
    roofline_fraction: float | None

    def to_json(self) -> dict:
        """``{"ops", "ms", "roofline_ms", "roofline_fraction"}``."""
        return {"ops": list(self.ops), "ms": self.ms, "roofline_ms": self.roofline_ms, "roofline_fraction": self.roofline_fraction}


@dataclass(frozen=True)
class PhaseProfile:
    """One profiled phase (``decode`` or ``prefill``), per step.

    Attributes:
        ops: op groups, largest ``ms`` first.
        total_ms: every kernel's time summed; kernel_calls: launches (CPU: operator calls).
        wall_ms: the profiled call's wall time, profiler overhead included.
        tokens, batch, context: what the step did (prefill: P tokens, batch 1, context 0).
        roofline_ms, roofline_fraction: the whole step's roofline time and roofline_ms / total_ms (None on the CPU).
        top: the largest raw kernels.
        matmul: decode on a GPU: the groups that read the weights (``profile_groups.DECODE_WEIGHT_OPS``) against the
            step's weight bytes; else None.
    """

    ops: tuple[OpTime, ...]
    total_ms: float
    kernel_calls: float
    wall_ms: float
    tokens: int
    batch: int
    context: int
    roofline_ms: float | None
    roofline_fraction: float | None
    top: tuple[KernelTime, ...]
    matmul: MatmulRoofline | None = None

    def to_json(self) -> dict:
        """The phase's gate-JSON block: ``ops`` first (what the report plots), then totals and the top kernels."""
        return {"ops": [o.to_json() for o in self.ops], "total_ms": self.total_ms, "kernel_calls": _count(self.kernel_calls),
                "kernel_names": sum(o.kernels for o in self.ops), "wall_ms": self.wall_ms, "tokens": self.tokens,
                "batch": self.batch, "context": self.context, "roofline_ms": self.roofline_ms,
                "roofline_fraction": self.roofline_fraction, "matmul": self.matmul.to_json() if self.matmul else None,
                "top_kernels": [{"name": k.name[:160], "op": group_of(k.name), "ms": k.ms, "calls": _count(k.calls)} for k in self.top]}


@dataclass(frozen=True)
class ProfileResult:
    """The gate JSON's ``profile`` block (``to_json``): phases ``decode`` and ``prefill``."""

    phases: dict[str, PhaseProfile]
    device: str
    gpu_profile: str
    quant: str
    seconds: float

    def to_json(self) -> dict:
        """``{"ok": true, "device", "gpu_profile", "quant", "time", "phases": {phase: PhaseProfile.to_json()}, ...}``."""
        on_gpu = self.device.startswith("cuda")
        return {"ok": True, "device": self.device, "gpu_profile": self.gpu_profile, "quant": self.quant,
                "time": "kernel device time (CUPTI)" if on_gpu else "operator CPU self time", "units": "ms per step",
                "phases": {p: self.phases[p].to_json() for p in PHASES if p in self.phases},
                "groups": list(GROUP_NAMES), "roofline_note": ROOFLINE_NOTE, "seconds": round(self.seconds, 3)}


def _kernel_rows(phase: str, raw: dict, steps: int) -> list[KernelTime]:
    acc: dict[str, list[float]] = {}
    for k in raw.get("kernels") or []:
        ms, calls = float(k["ms"]), float(k["calls"])
        if not math.isfinite(ms) or ms < 0 or not math.isfinite(calls) or calls < 0:
            raise ProfileError(f"profile {phase}: kernel {str(k['name'])[:80]!r} has time {ms} ms over {calls} calls; "
                               "times must be finite and non-negative")
        row = acc.setdefault(str(k["name"]), [0.0, 0.0])
        row[0], row[1] = row[0] + ms, row[1] + calls
    return [KernelTime(name, ms / steps, calls / steps) for name, (ms, calls) in acc.items()]


def summarize_phase(phase: str, raw: dict, cost: roofline.StepCost | None, gpu: GpuProfile | None, top: int = 12) -> PhaseProfile:
    """Group one phase's raw kernels (``profile_capture`` form) into ops; roofline figures when ``cost`` and ``gpu``.

    Raises:
        ProfileError: a non-finite or negative time, or ``steps`` < 1.
    """
    steps = int(raw.get("steps") or 0)
    if steps < 1:
        raise ProfileError(f"profile {phase}: steps must be at least 1, got {raw.get('steps')!r}")
    kernels = _kernel_rows(phase, raw, steps)
    acc: dict[str, list] = {}  # group -> [ms, calls, distinct names]
    for k in kernels:
        row = acc.setdefault(group_of(k.name), [0.0, 0.0, 0])
        row[0], row[1], row[2] = row[0] + k.ms, row[1] + k.calls, row[2] + 1
    on_gpu = cost is not None and gpu is not None
    ops = []
    for op, (ms, calls, n) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
        basis = DECODE_ROOFLINE_BASIS.get(op) if on_gpu and phase == "decode" else None
        frac = None
        if basis is not None and ms > 0:
            frac = getattr(cost, basis) / (gpu.mem_bw_gbs * 1e9) * 1e3 / ms
        ops.append(OpTime(op, ms, calls, n, frac, basis))
    total = sum(k.ms for k in kernels)
    roof_ms = cost.seconds(gpu) * 1e3 if on_gpu else None
    matmul = None
    if on_gpu and phase == "decode":
        mm_ms = sum(o.ms for o in ops if o.op in DECODE_WEIGHT_OPS)
        mm_roof = cost.weight_bytes / (gpu.mem_bw_gbs * 1e9) * 1e3
        matmul = MatmulRoofline(DECODE_WEIGHT_OPS, mm_ms, mm_roof, mm_roof / mm_ms if mm_ms > 0 else None)
    return PhaseProfile(tuple(ops), total, sum(k.calls for k in kernels), float(raw.get("wall_ms") or 0.0) / steps,
                        int(raw.get("tokens") or 0), int(raw.get("batch") or 0), int(raw.get("context") or 0), roof_ms,
                        roof_ms / total if roof_ms is not None and total > 0 else None,
                        tuple(sorted(kernels, key=lambda k: -k.ms)[:top]), matmul)


def summarize(raw: dict, text: dict, quant: str, gpu: GpuProfile | None, seconds: float = 0.0) -> ProfileResult:
    """The ``ProfileResult`` of an ``engine.profile`` reply; ``gpu`` None (the CPU) leaves every roofline figure None.

    Raises:
        ProfileError: a phase is missing or its data is unusable.
    """
    missing = [p for p in PHASES if p not in (raw.get("phases") or {})]
    if missing:
        raise ProfileError(f"profile reply lacks phase(s) {', '.join(missing)}")
    device = str(raw.get("device") or "cpu")
    if not device.startswith("cuda"):
        gpu = None
    q = get_quant(quant)
    phases = {}
    for p in PHASES:
        body = raw["phases"][p]
        cost = None
        if gpu is not None:
            cost = (roofline.decode_step(text, q, batch=int(body["batch"]), context=int(body["context"])) if p == "decode"
                    else roofline.prefill(text, q, int(body["tokens"])))
        phases[p] = summarize_phase(p, body, cost, gpu)
    return ProfileResult(phases, device, gpu.name if gpu is not None else "cpu", quant, seconds)


def run_profile(engine_dir: str | Path, checkpoint_dir: str | Path, config: ProfileConfig) -> ProfileResult:
    """Load the engine in a worker and profile one prefill and one decode step (``ProfileConfig``).

    Raises:
        ProfileError: the engine raised during load or the profile, or its data is unusable.
        harness.worker.WorkerFailure: the worker overran ``config.limit_s`` (or a call limit) or died.
    """
    import torch

    from harness.bench import model_facts
    from harness.nonce import prompt_seed
    from harness.workloads import draw_prompts

    t0 = time.monotonic()
    text, quant = model_facts(checkpoint_dir)
    vocab = int(text["vocab_size"])
    seed = prompt_seed(config.seed, config.nonce) * 1000 + 999  # apart from the bench's per-round seeds
    prompt = draw_prompts(seed, 1, config.prompt, vocab)[0]
    decode_prompts = draw_prompts(seed + 1, config.batch, config.context, vocab)
    decode_tokens = draw_prompts(seed + 2, 1, config.batch, vocab)[0]
    worker = Worker("engine", engine_dir=engine_dir, limits=config.limits, isolation=config.isolation)
    worker.stage_deadline = t0 + config.limit_s
    cap = config.own_capacity().union(config.load_capacity)
    try:
        try:
            worker.call("engine.load", timeout=config.limits.load_s, engine_dir=str(worker.engine_dir),
                        checkpoint=str(Path(checkpoint_dir).resolve()), device=config.device, max_batch=cap.max_batch,
                        max_seq_len=cap.max_seq_len, threads=torch.get_num_threads())
        except EngineError as err:
            raise ProfileError(f"candidate: load raised {err}") from None
        try:
            raw = worker.call("engine.profile", timeout=config.limit_s, prompt=prompt, decode_prompts=decode_prompts,
                              decode_tokens=decode_tokens, warmup=config.warmup)
        except EngineError as err:
            raise ProfileError(f"candidate: profile raised {err}") from None
    finally:
        worker.close()
    return summarize(raw, text, quant, config.gpu if config.device == "cuda" else None, time.monotonic() - t0)

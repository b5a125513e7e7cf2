"""The worker side of the profile stage: torch.profiler around one prefill and one decode step of a loaded engine.

Runs inside an engine's worker (``harness.worker_main``'s ``engine.profile`` op), never in the judge.
Each phase is first run ``warmup`` times unprofiled (compilation, autotuning, CUDA-graph capture
happen there), then once under ``torch.profiler.profile`` with CPU activities always and CUDA
activities on a GPU. What comes back is plain data: per raw kernel name, the total time in ms and
the number of calls, where time is the kernels' device time on a GPU (CUPTI) and the operators'
CPU self time on the CPU (so nested operators are not counted twice).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _kernels(prof: Any, cuda: bool) -> list[dict]:
    """``[{"name", "ms", "calls"}]`` of a finished profiler: device events on a GPU, CPU self time on the CPU."""
    from torch.autograd import DeviceType

    acc: dict[str, list[float]] = {}
    for ev in prof.events():
        if cuda:
            if ev.device_type != DeviceType.CUDA:
                continue
            us = float(ev.time_range.elapsed_us())  # the kernel's own span (device_time_total reads 0 for async events)
        else:
            if ev.device_type != DeviceType.CPU:
                continue
            us = float(ev.self_cpu_time_total or 0.0)
        row = acc.setdefault(ev.name, [0.0, 0])
        row[0] += us / 1e3
        row[1] += 1
    return [{"name": n, "ms": ms, "calls": int(c)} for n, (ms, c) in sorted(acc.items(), key=lambda kv: -kv[1][0])]


def _profiled(fn: Callable[[], Any], device: torch.device) -> tuple[Any, list[dict], float]:
    """Run ``fn`` once under the profiler; returns (its result, kernels, wall ms of the profiled call)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    _sync(device)
    with profile(activities=activities) as prof:
        t = time.perf_counter()
        out = fn()
        _sync(device)
        wall = (time.perf_counter() - t) * 1e3
    return out, _kernels(prof, cuda), wall


def capture(engine: Any, prompt: list[int], decode_prompts: list[list[int]], decode_tokens: list[int],
            warmup: int = 1) -> dict:
    """Profile one prefill of ``prompt`` and one decode step of ``len(decode_prompts)`` sequences.

    Args:
        engine: a loaded engine (``prefill``, ``decode``, ``release``, ``device``: docs/CONTRACTS.md).
        prompt: token ids of the prefill phase's prompt (P tokens).
        decode_prompts: B prompts prefilled (unprofiled) before the decode phase.
        decode_tokens: the B tokens fed to every decode step.
        warmup: unprofiled runs of each phase before the profiled one (>= 0).

    Returns:
        ``{"device", "phases": {"prefill"|"decode": {"kernels": [{"name", "ms", "calls"}], "wall_ms", "steps",
        "tokens", "batch", "context"}}}``; ``context`` is the tokens each sequence had cached before the profiled
        decode step. ``wall_ms`` is the profiled call's wall time, profiler overhead included.

    Raises:
        ValueError: empty prompt, B = 0, or B prompts and tokens of different counts.
    """
    if not prompt or not decode_prompts or len(decode_prompts) != len(decode_tokens):
        raise ValueError(f"profile needs a prompt and as many decode prompts as tokens, got {len(prompt)} prompt "
                         f"tokens, {len(decode_prompts)} decode prompts, {len(decode_tokens)} tokens")
    device = torch.device(getattr(engine, "device", "cpu"))
    prompt = [int(t) for t in prompt]
    tokens = [int(t) for t in decode_tokens]
    phases: dict[str, dict] = {}
    for _ in range(max(0, int(warmup))):
        res = engine.prefill([prompt])
        _sync(device)
        engine.release(list(res.slots))
    res, kernels, wall = _profiled(lambda: engine.prefill([prompt]), device)
    engine.release(list(res.slots))
    phases["prefill"] = {"kernels": kernels, "wall_ms": wall, "steps": 1, "tokens": len(prompt), "batch": 1, "context": 0}

    slots = list(engine.prefill([[int(t) for t in p] for p in decode_prompts]).slots)
    try:
        for _ in range(max(0, int(warmup))):
            engine.decode(slots, tokens)
            _sync(device)
        _, kernels, wall = _profiled(lambda: engine.decode(slots, tokens), device)
    finally:
        engine.release(slots)
    context = min(len(p) for p in decode_prompts) + max(0, int(warmup))
    phases["decode"] = {"kernels": kernels, "wall_ms": wall, "steps": 1, "tokens": len(tokens), "batch": len(tokens),
                        "context": context}
    return {"device": str(device), "phases": phases}

"""The gate's stages (static, parity, bench; profile, advisory), each running engine code only in workers (``harness.worker``).

A stage function takes a ``StageContext`` and returns a ``StageOutcome``; it never raises for
anything the engine did: a worker that overran or died comes back as ``WorkerFailure`` and is
turned into verdict ``timeout``/``crashed`` by ``harness.gate``.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.worker import EngineError, Worker, WorkerLimits


@dataclass(frozen=True)
class StageContext:
    """What a stage needs: the gate's arguments (``harness.gate.GateArgs``), worker limits and isolation, and the
    stage's secret prompt nonce (``harness.nonce.stage_nonce``)."""

    args: Any
    limits: WorkerLimits
    isolation: str
    nonce: int
    #: the one ``engine.load`` capacity of every engine worker of the gate (``gate_capacity``, computed once)
    capacity: Any
    #: workers carried between stages: ``reference`` (a ReferenceCache started at the gate's start, so its imports
    #: overlap the static stage) and ``engine_worker`` (the static stage's worker, reused by parity once static is green);
    #: and figures: ``path_noise`` (parity's largest decode consistency of a green run, for the bench's replay check)
    shared: dict = field(default_factory=dict)


@dataclass
class StageOutcome:
    """A stage's verdict (``pass``/``fail``/``timeout``/``crashed``), error, detail, and the block it adds to the
    gate JSON (``parity``, ``bench`` or ``profile``), if any."""

    verdict: str
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    block: dict[str, Any] | None = None


def stage_static(ctx: StageContext) -> StageOutcome:
    """Layout, source rules, sizes, tunables and the audited import (``harness.static_checks``), in a worker."""
    a = ctx.args
    w = Worker("static", engine_dir=a.engine, limits=ctx.limits, isolation=ctx.isolation, keep_links=True)
    keep = False
    try:
        try:
            res = w.call("static", timeout=ctx.limits.static_s, engine_dir=str(w.engine_dir), checkpoint=str(a.checkpoint))
        except EngineError as err:
            return StageOutcome("fail", f"the static checks raised {err}", {"traceback": err.traceback})
        keep = bool(res["ok"]) and "parity" in a.stages  # green: the same copy and process serve parity next
        if keep:
            ctx.shared["engine_worker"] = w
    finally:
        if not keep:
            w.close()
    return StageOutcome("pass" if res["ok"] else "fail", res["error"], res["detail"])


def parity_lengths(a) -> tuple[int, ...]:
    """The parity prompt lengths of gate args ``a``: ``--parity-lengths`` or the device's default set, plus every
    prompt length the bench stage will time that the set lacks, in workload order (docs/PARITY.md, "What runs"); where
    the bench jitters its lengths (``--length-jitter``), lengths in the same range (``bench_range_lengths``).

    Why: a cut that shows only at the bench's lengths would otherwise be timed and never judged: past some context
    (attention limited to a window longer than every parity prompt, timed by ``ttft-8k``, ``prefill-16k``), or at the
    bench's own short prompts (the red team's ``bench_length_fp8_acts``: e4m3 expert inputs for prompts of 4-16 tokens).
    """
    from harness.bench import shapes_for
    from harness.prompts import SeedDrawn, default_lengths
    from harness.workload_draws import length_spread
    from harness.workloads import parse_workloads

    lengths = tuple(a.parity_lengths) if a.parity_lengths else default_lengths(a.device)
    if "bench" not in a.stages:
        return lengths
    fixed = {int(n) for n in lengths if not isinstance(n, SeedDrawn)}
    extra: list[int] = []
    for w in parse_workloads(list(a.workloads)):
        p = w.at(shapes_for(a.scale)).prompt
        for n in bench_range_lengths(p, length_spread(p, a.length_jitter)):
            if (isinstance(n, SeedDrawn) or n not in fixed) and repr(n) not in map(repr, extra):
                extra.append(n)
    return (*lengths, *extra)


#: A jittered bench range of at most this many lengths is covered whole by parity.
BENCH_FULL_COVER = 5
#: Wider ranges get one seed-drawn length in each of this many equal parts, for prompts up to ``BENCH_STRATA_MAX``
#: tokens (longer ones: one draw over the range; each such prompt is a long reference run on the GPU).
BENCH_STRATA = 3
BENCH_STRATA_MAX = 2048


def bench_range_lengths(p: int, d: int) -> list[int]:
    """The parity lengths for a bench prompt of nominal length ``p`` drawn in ``p ± d``: ``p`` when ``d`` is 0; every
    length of the range when it holds at most ``BENCH_FULL_COVER``; else one ``SeedDrawn`` per equal part of it
    (``BENCH_STRATA`` parts up to ``BENCH_STRATA_MAX`` tokens, one above).

    Why: a cut armed on part of the range the bench draws from (the red team's ``bench_length_fp8_acts``: prompts of
    4-16 tokens, the CPU bench drawing 14-18) met parity's one drawn length with probability 3/5, and went untested in
    the other gates. A cut must fire on a good share of the bench's draws to win its rounds, and every third of the
    range now holds a parity prompt."""
    from harness.prompts import SeedDrawn

    if not d:
        return [p]
    lo, hi = p - d, p + d
    width = hi - lo + 1
    if width <= BENCH_FULL_COVER:
        return list(range(lo, hi + 1))
    k = BENCH_STRATA if p <= BENCH_STRATA_MAX else 1
    edges = [lo + width * i // k for i in range(k + 1)]
    return [SeedDrawn(edges[i], edges[i + 1] - 1) for i in range(k)]


def gate_capacity(a):
    """The one ``engine.load`` capacity (``harness.workloads.Capacity``) of every engine worker of gate ``a``: the union
    (max of each field) of what its selected stages need, so load's arguments say nothing about the stage:

    - parity: one slot per prompt, the longest prompt (a seed-drawn length at its upper bound; the bench's longest
      prompt when the gate adds it, ``parity_lengths``) + the decode steps + 1 (``harness.parity.parity_capacity``);
    - bench: the selected workloads' ``harness.workloads.capacity`` (max S + 1 slots of max(P + N) + 8 tokens);
    - profile: ``ProfileConfig.own_capacity`` (B + 1 slots of max(P, C + 2) + 8 tokens);
    - at least ``harness.workloads.SERVE_CAPACITY`` (64 x 4096, ``metainfer serve``'s default load).

    Why: ``tests/cheats/bench_from_load_capacity.py`` armed fp8 MoE activations when load() was asked for the bench's
    capacity (5 x 32 on the CPU shapes) and stayed the template engine under parity's (11 x 977).

    Memory: at full size with the default workloads every worker loads 64 x 4096 (about 10 GB of KV + GDN state per
    engine at a static layout); docs/BENCHMARKS.md, "Capacity".
    """
    from harness.bench import shapes_for
    from harness.parity import parity_capacity
    from harness.profile import ProfileConfig
    from harness.prompts import default_steps
    from harness.workloads import SERVE_CAPACITY, capacity, parse_workloads

    if not {"parity", "bench", "profile"} & set(a.stages):
        return None  # no stage loads an engine
    caps = [SERVE_CAPACITY]
    if "parity" in a.stages:
        caps.append(parity_capacity(parity_lengths(a), a.parity_steps or default_steps(a.device)))
    shapes = shapes_for(a.scale)
    if "bench" in a.stages:
        caps.append(capacity(parse_workloads(list(a.workloads)), shapes, a.length_jitter))
    if "profile" in a.stages:
        from metainfer.targets import get_gpu

        caps.append(ProfileConfig(prompt=shapes.prompt, batch=a.profile_batch, context=shapes.prompt, seed=a.seed,
                                  device=a.device, gpu=get_gpu(a.gpu)).own_capacity())
    return caps[0].union(*caps[1:])


def stage_parity(ctx: StageContext) -> StageOutcome:
    """Engine against the HF reference (``harness.parity.run_parity``), both in workers."""
    from harness.parity import run_parity

    a = ctx.args
    quick = {k: v for k, v in (("lengths", parity_lengths(a)), ("steps", a.parity_steps)) if v is not None}
    res = run_parity(a.engine, a.checkpoint, seed=a.seed, device=a.device, prompt_nonce=ctx.nonce, limits=ctx.limits,
                     isolation=ctx.isolation, reference=ctx.shared.get("reference"),
                     engine_worker=ctx.shared.pop("engine_worker", None), load_capacity=ctx.capacity,
                     serving="quick" if a.parity_lengths or a.parity_steps else "full", **quick)
    if ctx.shared.get("reference") is not None:
        ctx.shared.pop("reference").close()
    if res.ok and math.isfinite(res.path_noise):  # the engine's own path noise, for the bench's replay check
        ctx.shared["path_noise"] = res.path_noise  # (harness.bench_replay), capped as parity's allowances are
    return _parity_outcome(res)


def _parity_outcome(res) -> StageOutcome:
    """A ``harness.parity.ParityResult`` as a stage outcome: the failed checks first, then the worst prompt and layer."""
    data = res.to_json()
    error = None
    if not res.ok:
        failures = list(res.update_failures)
        failures += [f"{p['name']}: {'; '.join(p.get('failures') or [])}" for p in data.get("prompts", []) if not p.get("ok")]
        worst = f"worst prompt {data['worst_prompt']}" + (f", first layer over tolerance {data['worst_layer']}" if data.get("worst_layer") else "")
        error = res.error or ((" | ".join(failures[:3]) or "a check failed") + f" ({worst})")
    detail = {"max_rel_err": data.get("max_rel_err"), "tolerance": data.get("tolerance"), "seconds": data.get("seconds"),
              "max_hidden_rel_err": data.get("max_hidden_rel_err")}
    return StageOutcome("pass" if res.ok else (res.verdict if res.verdict != "pass" else "fail"), error, detail, data)


def stage_twin(ctx: StageContext) -> StageOutcome:
    """The candidate's twin (``--twin-engine``: its edits on a render of the first layer periods, made by
    ``metainfer.twin``) on the checkpoint cut to the same layers, against a float32 reference (docs/PARITY.md, "A
    float32 twin pass"). The twin must hold the candidate's code byte for byte outside ``harness.twin.DEPTH_FILES``.
    """
    import shutil
    import tempfile

    from harness.fingerprint import differences, fingerprint
    from harness.parity import run_parity
    from harness.twin import code_differences, truncate_checkpoint, twin_prompt_lengths

    a = ctx.args
    if a.twin_engine is None:
        return StageOutcome("fail", "the twin stage needs --twin-engine DIR, the candidate's twin (metainfer.twin.make_twin)", {})
    diff = code_differences(a.engine, a.twin_engine)
    if diff:
        return StageOutcome("fail", "the twin engine does not run the candidate's code: " + "; ".join(diff[:8]), {"changes": diff})
    work = Path(tempfile.mkdtemp(prefix="metainfer-twin-checkpoint-"))
    try:
        ck = truncate_checkpoint(a.checkpoint, a.twin_periods, work / "checkpoint")
        # the gate's integrity check covers the real checkpoint only: the twin's is fingerprinted here
        memo: dict[str, str] = {}
        before = fingerprint(ck, memo, disk_cache=False)
        res = run_parity(a.twin_engine, ck, seed=a.seed, device=a.device, prompt_nonce=ctx.nonce, limits=ctx.limits,
                         isolation=ctx.isolation, reference_dtype="float32",
                         lengths=twin_prompt_lengths(parity_lengths(a), a.device), steps=a.parity_steps, serving="off")
        changed = differences(before, fingerprint(ck, memo, disk_cache=False))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if changed:
        return StageOutcome("tampered", "the twin's checkpoint changed during the stage: " + "; ".join(changed[:8]),
                            {"changes": changed, "periods": a.twin_periods})
    out = _parity_outcome(res)
    return StageOutcome(out.verdict, out.error and f"twin ({a.twin_periods} period(s), float32 reference): {out.error}",
                        {**out.detail, "periods": a.twin_periods}, out.block)


def stage_bench(ctx: StageContext) -> StageOutcome:
    """Candidate and baseline timed A/B in workers (``harness.bench.run_bench``), outputs checked in full."""
    from harness.bench import BenchConfig, run_bench, shapes_for
    from metainfer.targets import get_gpu

    a = ctx.args
    config = BenchConfig(list(a.workloads), a.rounds, a.seed, shapes_for(a.scale), a.device, get_gpu(a.gpu),
                         nonce=ctx.nonce, limits=ctx.limits, isolation=ctx.isolation, load_capacity=ctx.capacity,
                         length_jitter=a.length_jitter, path_noise=ctx.shared.get("path_noise"))
    res = run_bench(a.engine, a.checkpoint, config, a.baseline)
    return StageOutcome("pass" if res.ok else "fail", None, {"objective": res.data.get("objective")}, res.data)


def stage_profile(ctx: StageContext) -> StageOutcome:
    """torch.profiler over one prefill and one decode step of the candidate, by op (``harness.profile.run_profile``).

    Advisory: ``harness.gate`` records a red profile under ``profile`` and keeps the gate's verdict (``ADVISORY``).
    Shapes: P = the bench's prompt length, B = ``--profile-batch``, C = P; the whole stage runs under
    ``--profile-timeout`` (default: the load limit plus one call limit).
    """
    from harness.bench import shapes_for
    from harness.profile import ProfileConfig, ProfileError, run_profile
    from metainfer.targets import get_gpu

    a = ctx.args
    shapes = shapes_for(a.scale)
    limit = a.profile_timeout or (ctx.limits.load_s + ctx.limits.call_s)
    config = ProfileConfig(prompt=shapes.prompt, batch=a.profile_batch, context=shapes.prompt, seed=a.seed,
                           device=a.device, gpu=get_gpu(a.gpu), nonce=ctx.nonce, limits=ctx.limits, isolation=ctx.isolation,
                           limit_s=limit, load_capacity=ctx.capacity)
    try:
        res = run_profile(a.engine, a.checkpoint, config)
    except ProfileError as err:
        return StageOutcome("fail", str(err))
    block = res.to_json()
    detail = {p: {"total_ms": b["total_ms"], "kernel_calls": b["kernel_calls"], "roofline_fraction": b["roofline_fraction"]}
              for p, b in block["phases"].items()}
    return StageOutcome("pass", None, detail, block)


STAGE_RUNNERS: dict[str, Callable[[StageContext], StageOutcome]] = {
    "static": stage_static, "parity": stage_parity, "twin": stage_twin, "bench": stage_bench, "profile": stage_profile,
}
#: stages whose failure is recorded (under their own JSON key) but never turns the gate red
ADVISORY = frozenset({"profile"})


def start_shared(ctx_args: Any, limits: WorkerLimits, isolation: str, parity_nonce: int) -> dict:
    """Workers to start at the gate's start: the reference (no engine code in it) when parity will run, so its
    imports overlap the static stage. A checkpoint that does not validate starts nothing (parity reports it)."""
    shared: dict = {}
    if "parity" in ctx_args.stages:
        from harness.reference_cache import ReferenceCache
        from metainfer.errors import MetainferError

        try:
            shared["reference"] = ReferenceCache(ctx_args.checkpoint, device=ctx_args.device, nonce=parity_nonce,
                                                 limits=limits, isolation=isolation)
            shared["reference"].start()
        except (MetainferError, OSError, ValueError):
            shared.pop("reference", None)
    return shared


def close_shared(shared: dict) -> None:
    """Stop whatever ``start_shared`` or a stage left in ``shared`` (workers; figures such as ``path_noise`` need no
    stopping)."""
    for item in list(shared.values()):
        if hasattr(item, "close"):
            item.close()
    shared.clear()


def engine_copies_loaded(modules: dict[str, Any], roots: list[Path]) -> list[str]:
    """Names of modules in ``modules`` (``sys.modules``) whose file lies under one of ``roots`` (engine folders)."""
    out = []
    for name, mod in list(modules.items()):
        f = getattr(mod, "__file__", None)
        if f and any(Path(f).resolve().is_relative_to(r.resolve()) for r in roots):
            out.append(name)
    return out

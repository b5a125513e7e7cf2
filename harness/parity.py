"""The parity stage: an engine against HF transformers on fresh prompts (docs/PARITY.md), each in its own process.

The reference (``harness.reference_cache.ReferenceCache``) and the engine run in worker
processes (``harness.worker``); the judge draws the prompts from the seed mixed with a secret
nonce (``prompt_seed``), sends them after ``load`` returned, and compares the plain results here.
For each prompt the reference greedily continues ``DECODE_STEPS`` tokens and gives teacher-forced
logits over prompt + continuation and its per-layer hidden states. The engine is fed the same
tokens (prefill of the prompt, then one ``decode`` per continuation token), once per prompt alone
and once with all prompts batched; its own greedy generation is compared too, and its hidden
states of every prompt are held to the per-layer tolerances (``Tolerance.hidden(i)``), so a
layer-local precision cut shows even when the logits stay within tolerance.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.parity_metrics import (
    first_bad_layer, greedy_agreement, kept_rows, layer_errors, layer_name, local_update_errors, max_abs,
    pooled_rows_error, pooled_update_errors, rel_l2, storage_ratios, trivial_reason,
)
from harness.nonce import prompt_seed
from harness.parity_rows import logit_rows
from harness.parity_result import ParityResult, PromptFigures, RunFigures, format_table
from harness.prompts import Prompt, default_lengths, default_steps, fresh_seed, make_prompts
from harness.reference import ReferenceRun
from harness.reference_cache import ReferenceCache, default_reference_dtype
from harness.tolerances import Tolerance, get_tolerance
from harness.worker import EngineError, Worker, WorkerFailure, WorkerLimits
from metainfer.errors import MetainferError

log = logging.getLogger(__name__)  # progress at INFO: where a long parity stage spends its time (METAINFER_LOG=INFO)

__all__ = ["EngineDirError", "ParityResult", "ReferenceCache", "default_reference_dtype", "format_table", "prompt_seed",
           "run_parity"]


class EngineDirError(MetainferError):
    """The engine folder holds no engine package."""


class _Engine:
    """The engine's public API, called in its worker (plain data in, CPU tensors out)."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker

    def prefill(self, prompts: list[list[int]], return_hidden: bool = False,
                rows: list[list[int] | None] | None = None) -> dict:
        return self.w.call("engine.prefill", prompts=prompts, return_hidden=return_hidden, rows=rows)

    def decode(self, slots: list[int], tokens: list[int]) -> torch.Tensor:
        return self.w.call("engine.decode", slots=slots, tokens=tokens)

    def release(self, slots: list[int]) -> None:
        self.w.call("engine.release", slots=slots)

    def generate(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        return self.w.call("engine.generate", prompts=prompts, max_tokens=n)


def _teacher_forced(engine: _Engine, seqs: list[ReferenceRun]) -> list[torch.Tensor]:
    """Prefill the prompts together, then decode the reference's tokens: float32 [S_i + n, V] per sequence
    (the prompt rows the reference kept, ``ReferenceRun.split``, then the n decode rows)."""
    res = engine.prefill([s.prompt for s in seqs], rows=[list(s.rows) if s.rows is not None else None for s in seqs])
    rows = [[lg.float()] for lg in res["logits"]]
    if len(rows) != len(seqs):
        raise ValueError(f"prefill of {len(seqs)} prompts returned {len(rows)} logit tensors")
    try:
        for j in range(len(seqs[0].continuation)):
            out = engine.decode(res["slots"], [s.continuation[j] for s in seqs])  # [B, V]
            for i in range(len(seqs)):
                rows[i].append(out[i : i + 1].float())
    finally:
        engine.release(res["slots"])
    return [torch.cat(r) for r in rows]


def _greedy(engine: _Engine, seqs: list[ReferenceRun]) -> list[list[int]]:
    out = engine.generate([s.prompt for s in seqs], len(seqs[0].continuation))
    if len(out) != len(seqs):
        raise ValueError(f"generate for {len(seqs)} prompts returned {len(out)} outputs")
    return out


def _judge(fig: PromptFigures, e: torch.Tensor, ref: ReferenceRun, greedy: list[int], tol: Tolerance, other: torch.Tensor) -> None:
    """Fill ``fig``'s figures from engine logits ``e`` [P + n, V] and record every failed check.

    ``other`` [P + n, V]: the same prompt's logits from the other mode (batched for alone and
    vice versa); their row-wise difference is the greedy slack (docs/PARITY.md, "Greedy ties").
    """
    r, n = ref.logits, ref.split
    reason = trivial_reason(e, r)
    if reason:
        fig.failures.append(reason)
    fig.prompt_rel_err, fig.decode_rel_err, fig.max_abs_err = rel_l2(e[:n], r[:n]), rel_l2(e[n:], r[n:]), max_abs(e, r)
    if not fig.prompt_rel_err <= tol.logits_prompt:
        fig.failures.append(f"prefill rel err {fig.prompt_rel_err:.3g} > {tol.logits_prompt:.3g}")
    if not fig.decode_rel_err <= tol.logits_decode:
        fig.failures.append(f"decode rel err {fig.decode_rel_err:.3g} > {tol.logits_decode:.3g}")
    steps = slice(n - 1, n - 1 + len(ref.continuation))  # rows that predicted the continuation
    slack = (e[steps] - other[steps]).abs().amax(-1)
    slack = torch.where(torch.isfinite(slack), slack, torch.zeros_like(slack))  # NaN rows fail on their own
    fig.greedy_match, fig.greedy_compared = greedy_agreement(
        list(greedy), ref.continuation, e[steps], r[steps], floor_rel=tol.tie_floor_rel, slack=slack
    )
    if fig.greedy_match < fig.greedy_compared:
        fig.failures.append(f"greedy token {fig.greedy_match} differs ({greedy[fig.greedy_match]} vs {ref.continuation[fig.greedy_match]})")


@dataclass
class _Hidden:
    """One prompt's prefill of prompt + continuation in one call, with per-layer figures.

    Attributes:
        engine: the engine's hidden states float32 [L + 1, T, H]; reference: the reference's, same shape.
        engine_rows: ``engine`` at the R compared positions (the prompt rows of ``ReferenceRun.rows`` and the n
            continuation positions; all T when the reference kept every row), [L + 1, R, H].
        local: reference layer l run on ``engine[l]``, float32 [L, R, H] (``harness.layer_local``).
        local_logits: ``lm_head(norm(engine[L]))`` by the reference, float32 [R, V].
        logits: the engine's own prefill logits at those positions, float32 [R, V] (the last n rows are the
            consistency's decode rows).
    """

    engine: torch.Tensor
    reference: torch.Tensor
    engine_rows: torch.Tensor
    local: torch.Tensor
    local_logits: torch.Tensor
    logits: torch.Tensor


def _hidden_check(engine: _Engine, reference: ReferenceCache, fig: PromptFigures, ref: ReferenceRun,
                  tol: Tolerance) -> _Hidden | None:
    """Per-layer hidden states of prompt + continuation against the reference's: record every layer's error
    and fail on the first layer over its tolerance (``tol.hidden(i)``). Returns the engine's and reference's
    hidden states and the reference layers run on the engine's ones (for the run-level checks), None when the
    engine gave none of the right shape or non-finite ones (recorded as a failure)."""
    tokens = ref.prompt + ref.continuation
    rows = None if ref.rows is None else list(ref.rows) + list(range(len(ref.prompt), len(tokens)))
    res = engine.prefill([tokens], return_hidden=True, rows=[rows])
    engine.release(res["slots"])
    if not res["hidden"]:
        fig.failures.append("engine returned no hidden states for return_hidden=True")
        return None
    r = reference.hidden(tokens)
    e = res["hidden"][0].float()
    if tuple(e.shape) != tuple(r.shape):
        fig.failures.append(f"hidden states of shape {tuple(e.shape)}, expected {tuple(r.shape)} ([L + 1, T, H])")
        return None
    fig.layer_errors = layer_errors(e, r)
    limits = [tol.hidden(i) for i in range(len(fig.layer_errors))]
    bad = first_bad_layer(fig.layer_errors, limits)
    if bad is not None:
        fig.worst_layer = layer_name(bad)
        fig.failures.append(f"hidden state after {layer_name(bad)} rel err {fig.layer_errors[bad]:.3g} > {limits[bad]:.3g}")
    logits = res["logits"][0].float()
    if not torch.isfinite(e).all() or not torch.isfinite(logits).all():
        fig.failures.append("NaN/Inf in the hidden states or logits of the hidden-state prefill: no layer-local figures")
        return None
    if tuple(logits.shape) != tuple(ref.logits.shape):
        fig.failures.append(f"hidden-state prefill logits of shape {tuple(logits.shape)}, expected {tuple(ref.logits.shape)}")
        return None
    local = reference.local(tokens, e, rows)
    e_rows = e if rows is None else e[:, rows]
    return _Hidden(e, r, e_rows, local["outputs"].float(), local["logits"].float(), logits)


def _run_checks(hidden: list[_Hidden], alone: list[torch.Tensor], batched: list[torch.Tensor], steps: int,
                tol: Tolerance) -> RunFigures:
    """The figures pooled over every prompt of the run (docs/PARITY.md): the accumulated per-layer update,
    the layer-local update and final-norm logits, and consistency: the teacher-forced logits of the alone and
    the batched runs (their prompt rows and their decode rows apart) against the logits of the engine's own
    hidden-state prefill of the same tokens, whose hidden states the layer-local figures checked (each prompt's
    worst rows left out apart: a cut in one long prompt's decode stays in)."""
    if not hidden:
        return RunFigures()
    run = RunFigures(
        update_errors=pooled_update_errors([h.engine for h in hidden], [h.reference for h in hidden]),
        local_update_errors=local_update_errors([h.engine_rows for h in hidden], [h.local for h in hidden],
                                                drop=tol.local_drop, min_drop=tol.local_min_drop),
        local_update_tolerances=[tol.local_update(x) for x in storage_ratios([h.reference for h in hidden])],
        local_logits_err=pooled_rows_error([h.logits for h in hidden], [h.local_logits for h in hidden]),
    )
    for mode, runs in (("alone", alone), ("batched", batched)):
        same = [(e, h.logits) for h, e in zip(hidden, runs, strict=True) if e.shape == h.logits.shape]
        for part, cut in (("prefill", slice(0, -steps if steps else None)), ("decode", slice(-steps, None))):
            pairs = [(e[cut], p[cut]) for e, p in same if e[cut].shape[0] > 0 and (part == "prefill" or steps > 0)]
            if pairs:
                run.consistency[f"{part} {mode}"] = pooled_rows_error([e for e, _ in pairs], [p for _, p in pairs],
                                                                      drop=tol.consistency_drop, per_pair=True)
                rows = sum(kept_rows(e.shape[0], tol.consistency_drop) for e, _ in pairs)
                run.consistency_tolerances[f"{part} {mode}"] = tol.consistency_for(rows)
    run.failures = [f"layer-local update of layers.{l} rel err {x:.3g} > {t:.3g}"
                    for l, (x, t) in enumerate(zip(run.local_update_errors, run.local_update_tolerances, strict=True))
                    if not x <= t]  # first: a layer-local failure names the layer itself
    run.failures += [f"pooled update of layers.{l} rel err {x:.3g} > {tol.update(l):.3g}"
                     for l, x in enumerate(run.update_errors or []) if not x <= tol.update(l)]
    if not run.local_logits_err <= tol.local_logits:
        run.failures.append(f"layer-local final norm + lm_head rel err {run.local_logits_err:.3g} > {tol.local_logits:.3g}")
    for mode, x in run.consistency.items():
        if not x <= run.consistency_tolerances[mode]:
            run.failures.append(f"consistency ({mode}): logits vs the engine's own hidden-state prefill rel err {x:.3g} > "
                                f"{run.consistency_tolerances[mode]:.3g}")
    return run


def _evaluate(engine: _Engine, reference: ReferenceCache, prompts: list[Prompt], refs: list[ReferenceRun],
              tol: Tolerance) -> tuple[list[PromptFigures], RunFigures]:
    """Every check on every prompt; returns the entries and the run-level figures (``RunFigures``)."""
    t0 = time.perf_counter()
    alone = [_teacher_forced(engine, [r])[0] for r in refs]
    alone_greedy = [_greedy(engine, [r])[0] for r in refs]
    batched = _teacher_forced(engine, refs)
    batched_greedy = _greedy(engine, refs)
    log.info("engine: teacher-forced and greedy runs, alone and batched, in %.1f s", time.perf_counter() - t0)
    t0 = last = time.perf_counter()
    figs: list[PromptFigures] = []
    hidden: list[_Hidden] = []
    kept_alone: list[torch.Tensor] = []
    kept_batched: list[torch.Tensor] = []
    for p, ref, ea, ga, eb, gb in zip(prompts, refs, alone, alone_greedy, batched, batched_greedy, strict=True):
        fa = PromptFigures(p.name, "alone", len(p.tokens))
        _judge(fa, ea, ref, ga, tol, eb)
        h = _hidden_check(engine, reference, fa, ref, tol)
        if h is not None:
            hidden.append(h)
            kept_alone.append(ea)
            kept_batched.append(eb)
        fb = PromptFigures(p.name, "batched", len(p.tokens))
        _judge(fb, eb, ref, gb, tol, ea)
        fb.batch_rel_err = rel_l2(eb, ea) if torch.isfinite(ea).all() and ea.shape == eb.shape else float("nan")
        if not fb.batch_rel_err <= tol.batch:
            fb.failures.append(f"batched vs alone rel err {fb.batch_rel_err:.3g} > {tol.batch:.3g}")
        figs += [fa, fb]
        if time.perf_counter() - last >= 5.0 and len(figs) < 2 * len(prompts):  # a line every 5 s or more
            log.info("hidden-state and layer-local checks: %d of %d prompts, %.0f s", len(figs) // 2, len(prompts),
                     time.perf_counter() - t0)
            last = time.perf_counter()
    return figs, _run_checks(hidden, kept_alone, kept_batched, len(refs[0].continuation), tol)


def _reference_runs(reference: ReferenceCache, prompts: list[Prompt], steps: int, seed: int) -> list[ReferenceRun]:
    """The reference's run of every prompt (``ReferenceCache.run``; logit rows sampled from ``seed``: ``logit_rows``),
    with a progress line every 5 s or more. Raises what the reference worker raises (the judge's own failure)."""
    refs: list[ReferenceRun] = []
    t0 = last = time.perf_counter()
    for i, p in enumerate(prompts):
        refs.append(reference.run(p.tokens, steps, logit_rows(len(p.tokens), reference.vocab_size, seed + i)))
        if time.perf_counter() - last >= 5.0 and i + 1 < len(prompts):
            log.info("reference: %d of %d prompts (the last %d tokens + %d steps), %.0f s", i + 1, len(prompts),
                     len(p.tokens), steps, time.perf_counter() - t0)
            last = time.perf_counter()
    log.info("reference: %d prompts (%d tokens) + %d steps each in %.1f s", len(prompts),
             sum(len(p.tokens) for p in prompts), steps, time.perf_counter() - t0)
    return refs


def _worst(errs: list[float]) -> float:
    """Largest error, NaN counted as inf; inf when there is none (nothing ran)."""
    return max((float("inf") if x != x else x for x in errs), default=float("inf"))


def _score(f: PromptFigures, tol: Tolerance) -> float:
    s = max(f.prompt_rel_err / tol.logits_prompt, f.decode_rel_err / tol.logits_decode)
    return float("inf") if s != s else s  # NaN ranks worst


def run_parity(
    engine_dir: str | Path,
    checkpoint_dir: str | Path,
    *,
    seed: int | None = None,
    device: str = "cpu",
    reference_dtype: str | None = None,
    lengths: tuple[int, ...] | None = None,
    steps: int | None = None,
    reference_device: str | None = None,
    reference: ReferenceCache | None = None,
    prompt_nonce: int | None = None,
    limits: WorkerLimits | None = None,
    isolation: str | None = None,
    engine_worker: Worker | None = None,
) -> ParityResult:
    """Run the parity stage of the engine in ``engine_dir`` on the checkpoint in ``checkpoint_dir``.

    Args:
        seed: prompt seed; None draws a fresh one (recorded in the result).
        device: ``cpu`` or ``cuda[:N]``; engine and reference both run there.
        reference_dtype: ``float32`` / ``bfloat16``; None: see :func:`default_reference_dtype`.
        lengths, steps: prompt lengths and teacher-forced decode steps; None: ``default_lengths(device)`` /
            ``default_steps(device)`` (docs/PARITY.md).
        reference_device: where the reference runs if not on ``device``.
        reference: a ``ReferenceCache`` to reuse across engines (its nonce, device and dtype win);
            None: one is made for this run and closed at its end.
        prompt_nonce: mixed into the prompt seed (``prompt_seed``); None: the cache's nonce, a fresh
            secret one when no cache is given. Recorded in the result, so a run can be reproduced.
        limits, isolation: worker call limits and isolation level (``harness.worker``).
        engine_worker: a started ``engine`` worker holding a copy of ``engine_dir`` to use (the gate passes
            its static stage's worker); None: one is started. Either way it is closed at the end.
    Returns:
        ``ParityResult``; an engine that raises, overruns a limit (``verdict == "timeout"``) or dies
        (``"crashed"``) makes a failed result, not an exception.
    Raises:
        EngineDirError: no engine package in ``engine_dir``.
        metainfer.errors.CheckpointError: the checkpoint folder does not validate.
        UnknownNameError: no tolerance is defined for the dtype pair.
        ValueError: bad dtype name.
        harness.worker.WorkerFailure: the reference worker (not the engine) overran or died.
    """
    start = time.perf_counter()
    seed = fresh_seed() if seed is None else seed
    lengths = default_lengths(device) if lengths is None else tuple(lengths)
    steps = default_steps(device) if steps is None else steps
    checkpoint_dir = Path(checkpoint_dir).resolve()
    if not (Path(engine_dir) / "engine" / "__init__.py").is_file():
        raise EngineDirError(f"no engine package at {Path(engine_dir) / 'engine'}; render one with `metainfer render`")
    limits = limits or WorkerLimits()
    own = reference is None
    if reference is None:
        ref_device = reference_device or device
        reference = ReferenceCache(checkpoint_dir, device=ref_device, dtype=reference_dtype, nonce=prompt_nonce,
                                   limits=limits, isolation=isolation)
    elif reference.checkpoint != checkpoint_dir:
        raise ValueError(f"the reference cache is of {reference.checkpoint}, not {checkpoint_dir}; make one per checkpoint")
    nonce = reference.nonce if prompt_nonce is None else prompt_nonce
    prompts = make_prompts(prompt_seed(seed, nonce), reference.vocab_size, lengths)
    deadline = time.monotonic() + limits.stage_s
    engine_dtype, figs, error, verdict = "unknown", [], None, "fail"
    reference.start()
    worker = engine_worker or Worker("engine", engine_dir=engine_dir, limits=limits, isolation=isolation)
    run = RunFigures()
    try:
        worker.stage_deadline = deadline
        # the engine loads in its worker while the reference works in its own (a full-size load takes tens of seconds)
        t0, loading, failed = time.perf_counter(), None, None
        try:
            loading = worker.send("engine.load", timeout=limits.load_s, pipelined=True, engine_dir=str(worker.engine_dir),
                                  checkpoint=str(checkpoint_dir), device=device, max_batch=len(prompts),
                                  max_seq_len=max(lengths) + steps + 1, threads=torch.get_num_threads())
        except WorkerFailure as err:  # the engine's worker is gone already: judged below, after the reference
            failed = err
        refs = _reference_runs(reference, prompts, steps, prompt_seed(seed, nonce))
        try:
            if failed is not None:
                raise failed
            worker.ready()
            info = worker.receive("engine.load", loading)
            engine_dtype = str(info.get("dtype"))
            log.info("engine loaded beside the reference: %.1f s from the request", time.perf_counter() - t0)
            tol = get_tolerance(engine_dtype, reference.dtype).for_device(device)
            t0 = time.perf_counter()
            figs, run = _evaluate(_Engine(worker), reference, prompts, refs, tol)
            log.info("engine runs and checks of %d prompts: %.1f s", len(prompts), time.perf_counter() - t0)
        except WorkerFailure as err:
            error, verdict = str(err), err.verdict
        except (EngineError, ValueError, RuntimeError, KeyError, TypeError, IndexError) as err:
            if isinstance(err, MetainferError):
                raise
            error = f"{type(err).__name__}: {err}" + (f"\n{err.traceback}" if isinstance(err, EngineError) else "")
    finally:
        worker.close()
        if own:
            reference.close()
    tol = get_tolerance(engine_dtype if engine_dtype != "unknown" else "bfloat16", reference.dtype).for_device(device)
    worst = max(figs, key=lambda f: _score(f, tol), default=None)
    worst_fail = max((f for f in figs if f.failures), key=lambda f: _score(f, tol), default=None)
    measured = run.update_errors is not None and run.local_update_errors is not None
    ok = error is None and bool(figs) and all(f.ok for f in figs) and measured and not run.failures
    return ParityResult(
        ok=ok,
        max_rel_err=_worst([f.prompt_rel_err for f in figs]),
        tolerance=tol.logits_prompt,
        max_decode_rel_err=_worst([f.decode_rel_err for f in figs]),
        decode_tolerance=tol.logits_decode,
        worst_prompt=(worst_fail or worst).name if (worst_fail or worst) else None,
        worst_layer=next((f.worst_layer for f in ([worst_fail] if worst_fail else []) + figs if f.worst_layer),
                         _failed_layer(run.failures)),
        prompts=figs, seed=seed, reference_dtype=reference.dtype, engine_dtype=engine_dtype,
        tolerances=tol.as_dict(), decode_steps=steps, device=str(device),
        seconds=time.perf_counter() - start, error=error, verdict="pass" if ok else verdict, prompt_nonce=nonce,
        max_hidden_rel_err=_worst([max(f.layer_errors) for f in figs if f.layer_errors]) if any(f.layer_errors for f in figs) else None,
        update_errors=run.update_errors, update_failures=run.failures, local_update_errors=run.local_update_errors,
        local_update_tolerances=run.local_update_tolerances, local_logits_err=run.local_logits_err,
        consistency=dict(run.consistency), consistency_tolerances=dict(run.consistency_tolerances),
    )


def _failed_layer(failures: list[str]) -> str | None:
    """The first ``layers.<l>`` named by a run-level failure, else None."""
    return next((w for f in failures for w in f.split() if w.startswith("layers.")), None)

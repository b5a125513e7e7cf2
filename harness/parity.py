"""The parity stage: an engine against HF transformers on fresh prompts (docs/PARITY.md), each in its own process.

The reference (``harness.reference_cache.ReferenceCache``) and the engine run in worker
processes (``harness.worker``); the judge draws the prompts from the seed mixed with a secret
nonce (``prompt_seed``), sends them after ``load`` returned, and compares the plain results
(``harness.parity_checks``, the engine's side driven through ``harness.parity_engine``).
For each prompt the reference greedily continues ``DECODE_STEPS`` tokens and gives teacher-forced
logits over prompt + continuation and its per-layer hidden states. The engine is fed the same
tokens (prefill of the prompt, then one ``decode`` per continuation token), once per prompt alone
and once with all prompts batched; its own greedy generation is compared too, and its hidden
states of every prompt are held to the per-layer tolerances (``Tolerance.hidden(i)``), so a
layer-local precision cut shows even when the logits stay within tolerance.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import torch

from harness.nonce import prompt_seed
from harness.parity_checks import evaluate, path_noise
from harness.parity_engine import EngineApi
from harness.parity_progress import Phase
from harness.parity_rows import logit_rows
from harness.parity_result import ParityResult, PromptFigures, RunFigures, format_table
from harness.prompts import Prompt, default_lengths, default_steps, fresh_seed, make_prompts
from harness.reference import ReferenceRun
from harness.reference_cache import ReferenceCache, default_reference_dtype
from harness.serving_checks import ServingConfig
from harness.tolerances import Tolerance, get_tolerance
from harness.worker import EngineError, Worker, WorkerFailure, WorkerLimits
from harness.workloads import Capacity
from metainfer.errors import MetainferError

__all__ = ["EngineDirError", "ParityResult", "ReferenceCache", "default_reference_dtype", "format_table", "parity_capacity",
           "prompt_seed", "run_parity"]


#: mixed into the prompt seed to draw the serving script (its draws differ from the prompts')
SERVING_SALT = 0x5E4F1CE
#: Salt of the wide batch's fresh prompts (``harness.parity_wide``): drawn from the prompt seed, apart from the others.
WIDE_SALT = 0x51DEBA7


class EngineDirError(MetainferError):
    """The engine folder holds no engine package."""


def same_gpu(a: str | torch.device, b: str | torch.device) -> bool:
    """True when ``a`` and ``b`` are one CUDA device; a bare ``cuda`` counts as any ``cuda:N`` (which one it means
    depends on each process's current device)."""
    a, b = torch.device(a), torch.device(b)
    if a.type != "cuda" or b.type != "cuda":
        return False
    return a.index is None or b.index is None or a.index == b.index


def _reference_runs(reference: ReferenceCache, prompts: list[Prompt], steps: int, seed: int) -> list[ReferenceRun]:
    """The reference's run of every prompt (``ReferenceCache.run``; logit rows sampled from ``seed``: ``logit_rows``),
    with a progress line every 5 s or more. Raises what the reference worker raises (the judge's own failure)."""
    refs: list[ReferenceRun] = []
    phase = Phase()
    for i, p in enumerate(prompts):
        refs.append(reference.run(p.tokens, steps, logit_rows(len(p.tokens), reference.vocab_size, seed + i)))
        phase.progress(i + 1, len(prompts), "reference: %d of %d prompts (the last %d tokens + %d steps), %.0f s",
                       len(p.tokens), steps)
    phase.done("reference: %d prompts (%d tokens) + %d steps each in %.1f s", len(prompts),
               sum(len(p.tokens) for p in prompts), steps)
    return refs


def parity_capacity(lengths: tuple[int, ...], steps: int) -> Capacity:
    """What parity's runs need of ``engine.load``: one slot per prompt (the batched run holds them all), the longest
    prompt + ``steps`` + 1 tokens each. A ``SeedDrawn`` length counts as its upper bound, so the figure does not
    depend on the draw (nor, through it, on the secret nonce)."""
    return Capacity(len(lengths), max(int(n) for n in lengths) + steps + 1)


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
    load_capacity: Capacity | None = None,
    serving: str = "full",
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
        load_capacity: the ``engine.load`` capacity to ask for at least (the gate passes the same one to every stage,
            ``harness.gate_stages.gate_capacity``, so load's arguments do not tell parity from the bench); the load
            asks for its union with :func:`parity_capacity`.
        serving: the serving script (``harness.serving_checks``): ``full`` (192 sampled tokens on the CPU, 128 on a
            GPU), ``quick`` (24, enough for gross sampler breaks only: the gate's quick parity, ``--parity-lengths`` /
            ``--parity-steps``) or ``off`` (the twin stage, which judges precision on a truncated model).
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
    if serving not in ("full", "quick", "off"):
        raise ValueError(f"serving={serving!r}: use full, quick or off")
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
    cap = parity_capacity(lengths, steps).union(load_capacity)
    try:
        worker.stage_deadline = deadline
        load, loading, failed = Phase(), None, None

        def send_load() -> None:
            nonlocal loading, failed
            try:
                loading = worker.send("engine.load", timeout=limits.load_s, pipelined=True, engine_dir=str(worker.engine_dir),
                                      checkpoint=str(checkpoint_dir), device=device, max_batch=cap.max_batch,
                                      max_seq_len=cap.max_seq_len, threads=torch.get_num_threads())
            except WorkerFailure as err:  # the engine's worker is gone already: judged below, after the reference
                failed = err

        # the engine loads in its worker while the reference works in its own, unless both are on one GPU: processes
        # sharing a GPU are time-sliced, and the launch-bound HF reference ran >10x slower beside another job there
        beside = not same_gpu(reference.device, device)
        if beside:
            send_load()
        refs = _reference_runs(reference, prompts, steps, prompt_seed(seed, nonce))
        if not beside:
            send_load()
        try:
            if failed is not None:
                raise failed
            worker.ready()
            info = worker.receive("engine.load", loading)
            engine_dtype = str(info.get("dtype"))
            load.done(("engine loaded beside the reference: %.1f s from the request" if beside else
                       "reference runs and then the engine load (one GPU): %.1f s"))
            tol = get_tolerance(engine_dtype, reference.dtype).for_device(device)
            checks = Phase()
            script = None if serving == "off" else ServingConfig(
                prompt_seed(seed, nonce) ^ SERVING_SALT, _eos(checkpoint_dir), exact=device == "cpu",
                pairs=6 if serving == "quick" else 24 if device == "cpu" else 16, tokens=4 if serving == "quick" else 8)
            figs, run = evaluate(EngineApi(worker), reference, prompts, refs, tol, wide=cap.max_batch, serving=script,
                                 wide_seed=prompt_seed(seed, nonce) ^ WIDE_SALT)
            checks.done("engine runs and checks of %d prompts: %.1f s", len(prompts))
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
        mixer_local_errors=list(run.mixer_local_errors), mixer_local_tolerance=run.mixer_local_tolerance,
        mixer_local_advisory=run.mixer_local_advisory, advisories=list(run.advisories),
        consistency=dict(run.consistency), consistency_tolerances=dict(run.consistency_tolerances),
        reference_consistency=dict(run.reference_consistency),
        serving=asdict(run.serving) if run.serving is not None else None,
        path_noise=path_noise(run, tol) if run.consistency else float("nan"), batch_noise=run.batch_noise,
    )


def _eos(checkpoint_dir: Path) -> int | None:
    """The checkpoint's EOS id (``text_config.eos_token_id``; the first of a list), None when it names none."""
    from metainfer.checkpoint import CheckpointReader

    eos = CheckpointReader(checkpoint_dir).text_config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) and eos else eos
    return int(eos) if isinstance(eos, int) else None


def _failed_layer(failures: list[str]) -> str | None:
    """The first ``layers.<l>`` named by a run-level failure, else None."""
    return next((w for f in failures for w in f.split() if w.startswith("layers.")), None)

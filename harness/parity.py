"""The parity stage: an engine against HF transformers on fresh seeded prompts (docs/PARITY.md).

For each prompt the reference greedily continues ``DECODE_STEPS`` tokens and gives teacher-forced
logits over prompt + continuation. The engine is fed the same tokens (prefill of the prompt, then
one ``decode`` per continuation token), once per prompt alone and once with all prompts batched;
its own greedy generation is compared too. On any failure, per-layer hidden states name the
first layer over tolerance. The engine is used only through its public API (docs/CONTRACTS.md).
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

import torch

from harness.engine_loader import import_engine
from harness.parity_metrics import (
    first_bad_layer, greedy_agreement, layer_errors, layer_name, max_abs, rel_l2, trivial_reason,
)
from harness.parity_result import ParityResult, PromptFigures, format_table
from harness.prompts import DECODE_STEPS, LENGTHS, Prompt, fresh_seed, make_prompts
from harness.reference import Reference, ReferenceRun, parse_dtype
from harness.tolerances import Tolerance, get_tolerance
from metainfer.errors import MetainferError

__all__ = ["EngineDirError", "ParityResult", "format_table", "run_parity"]

#: Layers bisected at most per run (each costs one engine prefill and one reference forward).
MAX_BISECT = 3


class EngineDirError(MetainferError):
    """The engine folder holds no importable engine package."""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def default_reference_dtype(device: str, checkpoint: Path) -> str:
    """``float32`` unless on CUDA the fp32 model would take over half the GPU's memory, then ``bfloat16``."""
    if torch.device(device).type != "cuda":
        return "float32"
    from metainfer.checkpoint import CheckpointReader
    from metainfer.targets.models import ModelSpec

    params = ModelSpec("checkpoint", "qwen3_5_moe", CheckpointReader(checkpoint).config).param_count()["total"]
    total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    return "float32" if 4 * params < total / 2 else "bfloat16"


def _teacher_forced(engine, seqs: list[ReferenceRun]) -> list[torch.Tensor]:
    """Prefill the prompts together, then decode the reference's tokens: float32 [P_i + n, V] per sequence."""
    res = engine.prefill([s.prompt for s in seqs])
    rows = [[lg.float().cpu()] for lg in res.logits]
    try:
        for j in range(len(seqs[0].continuation)):
            out = engine.decode(res.slots, [s.continuation[j] for s in seqs])  # [B, V]
            for i in range(len(seqs)):
                rows[i].append(out[i : i + 1].float().cpu())
    finally:
        engine.release(res.slots)
    return [torch.cat(r) for r in rows]


def _greedy(engine, module, seqs: list[ReferenceRun]) -> list[list[int]]:
    params = module.SamplingParams(max_tokens=len(seqs[0].continuation), temperature=0.0, ignore_eos=True)
    return engine.generate([s.prompt for s in seqs], params)


def _judge(fig: PromptFigures, e: torch.Tensor, ref: ReferenceRun, greedy: list[int], tol: Tolerance, other: torch.Tensor) -> None:
    """Fill ``fig``'s figures from engine logits ``e`` [P + n, V] and record every failed check.

    ``other`` [P + n, V]: the same prompt's logits from the other mode (batched for alone and
    vice versa); their row-wise difference is the greedy slack (docs/PARITY.md, "Greedy ties").
    """
    r, n = ref.logits, len(ref.prompt)
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


def _bisect(engine, reference: Reference, fig: PromptFigures, ref: ReferenceRun, tol: Tolerance) -> None:
    """Per-layer hidden states of prompt + continuation: record errors and the first layer over tolerance."""
    tokens = ref.prompt + ref.continuation
    try:
        res = engine.prefill([tokens], return_hidden=True)
        engine.release(res.slots)
    except Exception as err:  # keep the figures already measured; say why there is no layer
        fig.failures.append(f"bisection prefill raised {type(err).__name__}: {err}")
        return
    if res.hidden is None:
        fig.failures.append("engine returned no hidden states for return_hidden=True")
        return
    fig.layer_errors = layer_errors(res.hidden[0].float().cpu(), reference.hidden_states(tokens))
    bad = first_bad_layer(fig.layer_errors, [tol.hidden(i) for i in range(len(fig.layer_errors))])
    fig.worst_layer = layer_name(bad) if bad is not None else "none (the prefill path is within tolerance at every layer)"


def _evaluate(engine, module, reference, prompts: list[Prompt], refs: list[ReferenceRun], tol: Tolerance) -> list[PromptFigures]:
    alone = [_teacher_forced(engine, [r])[0] for r in refs]
    alone_greedy = [_greedy(engine, module, [r])[0] for r in refs]
    batched = _teacher_forced(engine, refs)
    batched_greedy = _greedy(engine, module, refs)
    figs: list[PromptFigures] = []
    for p, ref, ea, ga, eb, gb in zip(prompts, refs, alone, alone_greedy, batched, batched_greedy, strict=True):
        fa = PromptFigures(p.name, "alone", len(p.tokens))
        _judge(fa, ea, ref, ga, tol, eb)
        fb = PromptFigures(p.name, "batched", len(p.tokens))
        _judge(fb, eb, ref, gb, tol, ea)
        fb.batch_rel_err = rel_l2(eb, ea) if torch.isfinite(ea).all() else float("nan")
        if not fb.batch_rel_err <= tol.batch:
            fb.failures.append(f"batched vs alone rel err {fb.batch_rel_err:.3g} > {tol.batch:.3g}")
        figs += [fa, fb]
    failing = sorted((f for f in figs if f.failures), key=lambda f: -_score(f, tol))
    done: set[str] = set()
    for f in failing:
        if f.prompt in done or len(done) >= MAX_BISECT:
            continue
        done.add(f.prompt)
        _bisect(engine, reference, f, refs[[p.name for p in prompts].index(f.prompt)], tol)
    return figs


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
    lengths: tuple[int, ...] = LENGTHS,
    steps: int = DECODE_STEPS,
    reference_device: str | None = None,
) -> ParityResult:
    """Run the parity stage of the engine in ``engine_dir`` on the checkpoint in ``checkpoint_dir``.

    Args:
        seed: prompt seed; None draws a fresh one (recorded in the result).
        device: ``cpu`` or ``cuda[:N]``; engine and reference both run there.
        reference_dtype: ``float32`` / ``bfloat16``; None: see :func:`default_reference_dtype`.
        lengths, steps: prompt lengths and teacher-forced decode steps (defaults: docs/PARITY.md).
        reference_device: where the reference runs if not on ``device`` (e.g. ``cuda:1`` when a
            bf16 engine and a bf16 reference of the full model do not fit on one GPU together).
    Returns:
        ``ParityResult``; an exception raised by the engine while running makes it a failed
        result (``error`` set), not an exception.
    Raises:
        EngineDirError: no engine package in ``engine_dir``, or it fails to import.
        metainfer.errors.CheckpointError: the checkpoint folder does not validate.
        UnknownNameError: no tolerance is defined for the dtype pair.
        ValueError: bad dtype name, or the engine refuses the checkpoint or device at load.
    """
    start = time.perf_counter()
    seed = fresh_seed() if seed is None else seed
    checkpoint_dir = Path(checkpoint_dir)
    try:
        module = import_engine(engine_dir)
    except (FileNotFoundError, AttributeError, ImportError, SyntaxError) as err:
        raise EngineDirError(f"cannot import an engine from {engine_dir}: {err}; render one with `metainfer render`") from err
    ref_device = reference_device or device
    ref_dtype = parse_dtype(reference_dtype or default_reference_dtype(ref_device, checkpoint_dir))
    reference = Reference.from_checkpoint(checkpoint_dir, device=ref_device, dtype=ref_dtype)
    prompts = make_prompts(seed, reference.vocab_size, lengths)
    engine = module.load(checkpoint_dir, device=device, max_batch=len(prompts), max_seq_len=max(lengths) + steps + 1)
    engine_dtype = _dtype_name(getattr(engine, "dtype", torch.bfloat16))
    tol = get_tolerance(engine_dtype, _dtype_name(ref_dtype))
    refs = [reference.run(p.tokens, steps) for p in prompts]
    figs, error = [], None
    try:
        figs = _evaluate(engine, module, reference, prompts, refs, tol)
    except Exception as err:  # the engine broke mid-run: a red gate with the reason, not a crash
        error = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=4)}"
    worst = max(figs, key=lambda f: _score(f, tol), default=None)
    worst_fail = max((f for f in figs if f.failures), key=lambda f: _score(f, tol), default=None)
    return ParityResult(
        ok=error is None and bool(figs) and all(f.ok for f in figs),
        max_rel_err=_worst([f.prompt_rel_err for f in figs]),
        tolerance=tol.logits_prompt,
        max_decode_rel_err=_worst([f.decode_rel_err for f in figs]),
        decode_tolerance=tol.logits_decode,
        worst_prompt=(worst_fail or worst).name if (worst_fail or worst) else None,
        worst_layer=next((f.worst_layer for f in ([worst_fail] if worst_fail else []) + figs if f.worst_layer), None),
        prompts=figs, seed=seed, reference_dtype=_dtype_name(ref_dtype), engine_dtype=engine_dtype,
        tolerances=tol.as_dict(), decode_steps=steps, device=str(device),
        seconds=time.perf_counter() - start, error=error,
    )

"""The parity checks (docs/PARITY.md): one prompt's logits and hidden states against the reference's, the
figures pooled over the run, and ``evaluate``, which runs the engine through all of them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from harness.consistency import consistency_figures, reference_consistency
from harness.parity_engine import EngineApi, greedy_tokens, teacher_forced_logits
from harness.parity_local_metrics import local_update_errors, mixer_local_errors, storage_ratios
from harness.parity_metrics import (
    batch_variation, first_bad_layer, greedy_agreement, greedy_self_agreement, layer_errors, layer_name, max_abs, pooled_rows_error,
    pooled_update_errors, rel_l2, row_variation, trivial_reason,
)
from harness.parity_progress import Phase
from harness.parity_result import PromptFigures, RunFigures
from harness.parity_wide import Window, wide_batch
from harness.prompts import Prompt
from harness.reference import ReferenceRun
from harness.reference_cache import ReferenceCache
from harness.serving_checks import ServingConfig, check_serving
from harness.tolerances import Tolerance


def judge_logits(fig: PromptFigures, e: torch.Tensor, ref: ReferenceRun, greedy: list[int], tol: Tolerance,
                 other: torch.Tensor) -> None:
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
    steps = greedy_rows(ref)
    slack, _ = batch_variation(e[steps], other[steps])
    fig.greedy_match, fig.greedy_compared = greedy_agreement(
        list(greedy), ref.continuation, e[steps], r[steps], floor_rel=tol.tie_floor_rel, slack=slack
    )
    if fig.greedy_match < fig.greedy_compared:
        fig.failures.append(f"greedy token {fig.greedy_match} differs ({greedy[fig.greedy_match]} vs {ref.continuation[fig.greedy_match]})")


def judge_greedy_self(fig: PromptFigures, e: torch.Tensor, ref: ReferenceRun, greedy: list[int], tol: Tolerance,
                      other: torch.Tensor, path: float) -> None:
    """Hold the entry's ``generate`` tokens to the engine's own teacher-forced rows ``e`` [P + n, V]
    (``parity_metrics.greedy_self_agreement``); ``other``: the other mode's rows (batch variation), ``path``: the
    run's path noise (``path_noise``). Records ``fig.greedy_self`` and a failure over the bound."""
    steps = greedy_rows(ref)
    slack, noise = batch_variation(e[steps], other[steps])
    at, fig.greedy_self = greedy_self_agreement(list(greedy), ref.continuation, e[steps], floor_rel=tol.tie_floor_rel,
                                                slack=slack, noise=noise, path=path)
    if at < len(ref.continuation):
        fig.failures.append(f"greedy token {at} ({greedy[at]}) is not a top-1 of the engine's own teacher-forced row "
                            f"({fig.greedy_self:.3g}x the bound): generate() computes otherwise than prefill()/decode()")


def greedy_rows(ref: ReferenceRun) -> slice:
    """The rows of a teacher-forced block [S + n, V] that predicted the continuation's n tokens (the last kept prompt
    row and the first n - 1 decode rows): what the greedy rules and the batch noise read."""
    return slice(ref.split - 1, ref.split - 1 + len(ref.continuation))


def path_noise(run: RunFigures, tol: Tolerance) -> float:
    """The engine's own path noise, relative to a row: how far a row it computes by another path (another batch,
    another prefill split) may lie from the same row of its teacher-forced ``prefill()``/``decode()``. Made of

    - its largest decode consistency figure of the run (teacher-forced decode rows against its own prefill of the
      same tokens), or the decode consistency threshold where none was measured or a figure is not finite (then
      another check fails anyway), and
    - its batch noise (``RunFigures.batch_noise``: the largest relative difference of one row that predicted a
      greedy token between two batches of the teacher-forced runs; none where not measured),

    in quadrature (independent sources), each at most ``run.path_cap`` (``ConsistencyFigures``: what an honest engine's
    figure may be, so that noise added to pass it buys no wider allowance; the decode consistency threshold where no
    cap was set)."""
    xs = [x for k, x in run.consistency.items() if k.startswith("decode")]
    own = min(max(xs), _cap(run, tol)) if xs and all(math.isfinite(x) for x in xs) else tol.consistency
    return math.hypot(own, batch_allowance(run, tol))


def batch_allowance(run: RunFigures, tol: Tolerance) -> float:
    """The engine's batch noise (``RunFigures.batch_noise``) at most ``run.path_cap`` (the decode consistency
    threshold where no cap was set), 0 where not measured: what a row computed in a batch the judge's teacher-forced
    runs did not form may differ by, relative to the row. Widens ``path_noise`` and, in quadrature, the serving
    script's path threshold (pieces, the equal-length batch, and through it the long decodes' drift threshold); a
    batch-invariant engine's is 0: nothing widens."""
    return min(run.batch_noise, _cap(run, tol)) if math.isfinite(run.batch_noise) else 0.0


def _cap(run: RunFigures, tol: Tolerance) -> float:
    """``run.path_cap``, or the decode consistency threshold where no cap was set."""
    return run.path_cap if math.isfinite(run.path_cap) else tol.consistency


@dataclass
class HiddenRun:
    """One prompt's prefill of prompt + continuation in one call, with per-layer figures.

    Attributes:
        engine: the engine's hidden states float32 [L + 1, T, H]; reference: the reference's, same shape.
        engine_rows: ``engine`` at the R compared positions (the prompt rows of ``ReferenceRun.rows`` and the n
            continuation positions; all T when the reference kept every row), [L + 1, R, H].
        local: reference layer l run on ``engine[l]``, float32 [L, R, H] (``harness.layer_local``).
        mixer: the engine's token-mixer outputs at the R positions, float32 [L, R, H].
        local_mixer: reference layer l's token mixer run on ``engine[l]``, float32 [L, R, H].
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
    mixer: torch.Tensor
    local_mixer: torch.Tensor


def check_hidden(engine: EngineApi, reference: ReferenceCache, fig: PromptFigures, ref: ReferenceRun,
                 tol: Tolerance) -> HiddenRun | None:
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
    m = (res.get("mixer") or [None])[0]
    want = (e.shape[0] - 1, logits.shape[0], e.shape[2])
    if m is None or tuple(m.shape) != want:
        got = "none" if m is None else f"shape {tuple(m.shape)}"
        fig.failures.append(f"engine returned token-mixer outputs of {got} for return_hidden=True, expected {want} "
                            "([L, R, H]: PrefillResult.mixer, docs/CONTRACTS.md)")
        return None
    if not torch.isfinite(m).all():
        fig.failures.append("NaN/Inf in the token-mixer outputs of the hidden-state prefill")
        return None
    local = reference.local(tokens, e, rows)
    e_rows = e if rows is None else e[:, rows]
    return HiddenRun(e, r, e_rows, local["outputs"].float(), local["logits"].float(), logits, m.float(),
                     local["mixers"].float())


def run_checks(hidden: list[HiddenRun], runs: dict[str, list[tuple[torch.Tensor, torch.Tensor, int]]], steps: int,
               tol: Tolerance, refs: list[ReferenceRun] | None = None) -> RunFigures:
    """The figures pooled over every prompt of the run (docs/PARITY.md): the accumulated per-layer update,
    the layer-local update and final-norm logits, and consistency: the teacher-forced logits of each mode's runs
    (``runs``: mode -> (the engine's own hidden-state prefill logits at the sequence's positions, its teacher-forced
    logits, both [S + n, V], the parity prompt it came from); ``alone``, ``batched`` and, when it ran, ``wide``), their
    prompt rows and their decode rows apart (each sequence's worst rows left out apart: a cut in one long prompt's
    decode stays in). The hidden-state prefill is the one the layer-local figures checked; a wide window's rows are
    rows of its source prompt's (``harness.parity_wide``). A figure's threshold counts the distinct prompts its rows
    came from (``Tolerance.consistency_for``: rows of one prompt err together). ``refs``: the reference runs,
    whose HF consistency (``reference_consistency``) anchors the consistency thresholds on a GPU."""
    if not hidden:
        return RunFigures()
    own = reference_consistency(refs or [], tol)
    run = RunFigures(
        update_errors=pooled_update_errors([h.engine for h in hidden], [h.reference for h in hidden],
                                           drop=tol.local_drop, min_drop=tol.local_min_drop),
        local_update_errors=local_update_errors([h.engine_rows for h in hidden], [h.local for h in hidden],
                                                drop=tol.local_drop, min_drop=tol.local_min_drop),
        local_update_tolerances=[tol.local_update(x) for x in storage_ratios([h.reference for h in hidden])],
        local_logits_err=pooled_rows_error([h.logits for h in hidden], [h.local_logits for h in hidden]),
        mixer_local_errors=mixer_local_errors([h.mixer for h in hidden], [h.local_mixer for h in hidden],
                                              drop=tol.local_drop, min_drop=tol.local_min_drop),
        mixer_local_tolerance=tol.mixer_local(),
        mixer_local_advisory=tol.mixer_advisory,
        reference_consistency=own,
    )
    cons = consistency_figures(runs, steps, tol, own)
    run.consistency, run.consistency_tolerances, run.run_threshold = cons.figures, cons.tolerances, cons.run_threshold
    run.path_cap = cons.path_cap
    run.failures = [f"layer-local update of layers.{l} rel err {x:.3g} > {t:.3g}"
                    for l, (x, t) in enumerate(zip(run.local_update_errors, run.local_update_tolerances, strict=True))
                    if not x <= t]  # first: a layer-local failure names the layer itself
    mixer = [f"layer-local token mixer of layers.{l} rel err {x:.3g} > {run.mixer_local_tolerance:.3g}"
             for l, x in enumerate(run.mixer_local_errors) if not x <= run.mixer_local_tolerance]
    if tol.mixer_advisory:
        run.advisories += mixer
    else:
        run.failures += mixer
    run.failures += [f"pooled update of layers.{l} rel err {x:.3g} > {tol.update(l):.3g}"
                     for l, x in enumerate(run.update_errors or []) if not x <= tol.update(l)]
    if not run.local_logits_err <= tol.local_logits:
        run.failures.append(f"layer-local final norm + lm_head rel err {run.local_logits_err:.3g} > {tol.local_logits:.3g}")
    for mode, x in run.consistency.items():
        if not x <= run.consistency_tolerances[mode]:
            run.failures.append(f"consistency ({mode}): logits vs the engine's own hidden-state prefill rel err {x:.3g} > "
                                f"{run.consistency_tolerances[mode]:.3g}")
    return run


def note_batch_dependence(fig: PromptFigures, greedy: list[int], alone_greedy: list[int]) -> None:
    """Name the cause of a batched or wide entry's greedy failure when the same prompt's ``generate`` alone gave
    another token at that step: the engine's tokens depend on what shares its steps (issue 13 forbids it), which a
    rounding difference can do through a near-tied top-k routing choice even when every logits check passes."""
    j = fig.greedy_match
    if fig.greedy_match < fig.greedy_compared and j < min(len(greedy), len(alone_greedy)) and greedy[j] != alone_greedy[j]:
        at = next(i for i, f in enumerate(fig.failures) if f.startswith(f"greedy token {j} differs"))
        fig.failures[at] += (f"; the same prompt's generate alone gave {alone_greedy[j]} there: this sequence's tokens "
                             f"depend on the batch it runs in (make every kernel's result independent of the other "
                             f"sequences' lengths and count)")


def judge_windows(windows: list[Window], own: list[torch.Tensor | None], wide: list[torch.Tensor],
                  greedy: list[list[int]], batch: int, tol: Tolerance, path: float) -> list[str]:
    """The run-level failures of the wide batch's windows (``harness.parity_wide``), the first of each kind: teacher-
    forced rows of another shape than the window's rows of its source's hidden-state prefill (``own``; None where
    that prefill gave no figures, a failure of its own already) and a ``generate`` token that is not a top-1 of the
    window's own teacher-forced rows (``judge_greedy_self``, the source's rows as the other mode)."""
    out = []
    for j, (w, p, e, g) in enumerate(zip(windows, own, wide, greedy, strict=True)):
        if p is None:
            continue
        name = f"wide{batch} window {j} (prompt {w.source}, first {len(w.prompt)} tokens)"
        if e.shape != p.shape:
            out.append(f"{name}: teacher-forced logits of shape {tuple(e.shape)}, expected {tuple(p.shape)}")
            break
        fig = PromptFigures(name, f"wide{batch}", len(w.prompt))
        judge_greedy_self(fig, e, w, g, tol, p, path)
        if fig.failures:
            out.append(f"{name}: {fig.failures[0]}")
            break
    return out


def judge_batch(fig: PromptFigures, e: torch.Tensor, alone: torch.Tensor, tol: Tolerance) -> None:
    """Batch invariance: a run of several sequences against the same prompt's ``alone`` logits (same shape)."""
    fig.batch_rel_err = rel_l2(e, alone) if torch.isfinite(alone).all() and alone.shape == e.shape else float("nan")
    if not fig.batch_rel_err <= tol.batch:
        fig.failures.append(f"{fig.mode} vs alone rel err {fig.batch_rel_err:.3g} > {tol.batch:.3g}")


def evaluate(engine: EngineApi, reference: ReferenceCache, prompts: list[Prompt], refs: list[ReferenceRun],
             tol: Tolerance, wide: int = 0, serving: ServingConfig | None = None,
             wide_seed: int = 0) -> tuple[list[PromptFigures], RunFigures]:
    """Every check on every prompt; returns the entries and the run-level figures (``RunFigures``).

    ``wide``: the decode batch the engine was loaded for (its slots); above ``len(refs)`` a batch of that many
    sequences runs teacher-forced and greedy (``harness.parity_wide``, windows drawn from ``wide_seed``): the short
    prompts in it are entries of mode ``wide<B>`` judged as a batched one is; every wide sequence's rows feed the
    ``wide`` consistency figures, and each window's greedy token is held to its own rows (run-level failures). ``serving``: run the serving script last, when every other
    check passed (``harness.serving_checks``; its failures are run-level failures), None to leave it out."""
    runs = Phase()
    alone = [teacher_forced_logits(engine, [r])[0] for r in refs]
    alone_greedy = [greedy_tokens(engine, [r])[0] for r in refs]
    batched = teacher_forced_logits(engine, refs)
    batched_greedy = greedy_tokens(engine, refs)
    wb = wide_batch(refs, wide, wide_seed)
    wide_idx, k = wb.pool, len(wb.pool)
    wide_logits = teacher_forced_logits(engine, wb.seqs(refs)) if len(wb) else []
    wide_greedy = greedy_tokens(engine, wb.seqs(refs)) if len(wb) else []
    runs.done("engine: teacher-forced and greedy runs, alone, batched and wide, in %.1f s")
    checks = Phase()
    figs: list[PromptFigures] = []
    hidden_of: dict[int, HiddenRun] = {}  # prompt index -> its hidden-state run, for the prompts that gave one
    for i, (p, ref, ea, ga, eb, gb) in enumerate(zip(prompts, refs, alone, alone_greedy, batched, batched_greedy, strict=True)):
        fa = PromptFigures(p.name, "alone", len(p.tokens))
        judge_logits(fa, ea, ref, ga, tol, eb)
        h = check_hidden(engine, reference, fa, ref, tol)
        if h is not None:
            hidden_of[i] = h
        fb = PromptFigures(p.name, "batched", len(p.tokens))
        judge_logits(fb, eb, ref, gb, tol, ea)
        note_batch_dependence(fb, gb, ga)
        judge_batch(fb, eb, ea, tol)
        figs += [fa, fb]
        checks.progress(len(figs) // 2, len(prompts), "hidden-state and layer-local checks: %d of %d prompts, %.0f s")
    for i, ew, gw in zip(wide_idx, wide_logits[:k], wide_greedy[:k], strict=True):
        fw = PromptFigures(prompts[i].name, f"wide{len(wb)}", len(prompts[i].tokens))
        judge_logits(fw, ew, refs[i], gw, tol, alone[i])
        note_batch_dependence(fw, gw, alone_greedy[i])
        judge_batch(fw, ew, alone[i], tol)
        figs.append(fw)
    runs = {"alone": [(h.logits, alone[i], i) for i, h in hidden_of.items()],
            "batched": [(h.logits, batched[i], i) for i, h in hidden_of.items()]}
    own = [hidden_of[w.source].logits[w.positions()] if w.source in hidden_of else None for w in wb.windows]
    # with each row's position in its source's own prefill: a window's rows and its source's rows at one position
    # compare with one own row, so the rows left out are positions of a source (harness.consistency.pooled_by_source)
    wide_runs = [(hidden_of[i].logits, ew, i, list(range(ew.shape[0]))) for i, ew in zip(wide_idx, wide_logits[:k], strict=True)
                 if i in hidden_of]
    wide_runs += [(p, ew, w.source, w.positions()) for w, p, ew in zip(wb.windows, own, wide_logits[k:], strict=True)
                  if p is not None]
    if wide_runs:
        runs["wide"] = wide_runs
    run = run_checks(list(hidden_of.values()), runs, len(refs[0].continuation), tol, refs)
    steps = [greedy_rows(r) for r in refs]
    run.batch_noise = max([row_variation(b[s], a[s]) for a, b, s in zip(alone, batched, steps, strict=True)]
                          + [row_variation(ew[steps[i]], alone[i][steps[i]])
                             for i, ew in zip(wide_idx, wide_logits[:k], strict=True)], default=0.0)
    path = path_noise(run, tol)
    entries = [x for i in range(len(refs)) for x in ((alone[i], alone_greedy[i], batched[i]), (batched[i], batched_greedy[i], alone[i]))]
    entries += [(ew, gw, alone[i]) for i, ew, gw in zip(wide_idx, wide_logits[:k], wide_greedy[:k], strict=True)]
    refs_of = [r for r in refs for _ in range(2)] + [refs[i] for i in wide_idx]
    for f, (e, g, other), ref in zip(figs, entries, refs_of, strict=True):
        judge_greedy_self(f, e, ref, g, tol, other, path)
    run.failures += judge_windows(wb.windows, own, wide_logits[k:], wide_greedy[k:], len(wb), tol, path)
    if serving is not None and not run.failures and all(f.ok for f in figs):  # a red run is judged already
        script = Phase()
        decode = run.run_threshold if math.isfinite(run.run_threshold) else tol.consistency * tol.consistency_run_k
        decode = math.hypot(decode, batch_allowance(run, tol))  # the script's batches are not the judge's
        run.serving = check_serving(engine, refs, alone, batched, max(wide, len(refs)), tol.tie_floor_rel, decode, serving,
                                    path)
        run.failures += run.serving.failures
        script.done("serving script: %d requests in %d steps, %.1f s", run.serving.requests, run.serving.steps)
    return figs, run

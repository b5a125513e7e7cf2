"""Comparison functions of the parity gate, on plain tensors (docs/PARITY.md defines each figure).

All take the engine's output ``e`` and the reference's ``r`` with equal shapes and compute in
float64 on CPU. None of them lets NaN through: a non-finite engine value makes an error
``inf`` and :func:`trivial_reason` names it, so every ``err <= tol`` test fails.
"""

from __future__ import annotations

import math

import torch


def _check(e: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if e.shape != r.shape:
        raise ValueError(f"engine output shape {tuple(e.shape)} != reference shape {tuple(r.shape)}")
    if not torch.isfinite(r).all():
        raise ValueError("the reference itself has non-finite values; the reference or its weights are broken")
    return e.detach().double().cpu(), r.detach().double().cpu()


def rel_l2(e: torch.Tensor, r: torch.Tensor) -> float:
    """Relative L2 error ``‖e − r‖ / ‖r‖`` over all elements (any shape; unitless).

    Returns ``inf`` if ``e`` has a NaN or Inf. Raises ``ValueError`` on a shape mismatch, a
    non-finite reference, or a zero reference (the ratio would mean nothing).
    """
    e, r = _check(e, r)
    if not torch.isfinite(e).all():
        return math.inf
    den = float(r.norm())
    if den == 0.0:
        raise ValueError("reference is all zeros; a relative error is undefined")
    return float((e - r).norm()) / den


def max_abs(e: torch.Tensor, r: torch.Tensor) -> float:
    """``max |e − r|`` over all elements, in the units of the inputs (logits: nats); ``inf`` on NaN/Inf."""
    e, r = _check(e, r)
    if not torch.isfinite(e).all():
        return math.inf
    return float((e - r).abs().max()) if e.numel() else 0.0


def trivial_reason(e: torch.Tensor, r: torch.Tensor, *, flat_rel: float = 1e-3) -> str | None:
    """Why the engine's logits ``e`` [T, V] are degenerate, or None if they are not.

    Degenerate: any NaN/Inf; at some position a spread across the vocabulary (std) below
    ``flat_rel`` times the reference's there (constant or zero logits); or, for T ≥ 2, the
    same row at every position where the reference's rows differ.
    """
    if e.ndim != 2:
        raise ValueError(f"logits must be [T, V], got shape {tuple(e.shape)}")
    e, r = _check(e, r)
    bad = ~torch.isfinite(e)
    if bad.any():
        t = int(bad.any(-1).nonzero()[0])
        return f"non-finite logits ({int(bad.sum())} NaN/Inf values, first at position {t})"
    flat = e.std(-1) <= flat_rel * r.std(-1)
    if flat.any():
        t = int(flat.nonzero()[0])
        return f"constant logits across the vocabulary at position {t} (std {float(e[t].std()):.3g} vs reference {float(r[t].std()):.3g})"
    if e.shape[0] >= 2:
        same_e = float((e - e[0]).abs().max()) <= 1e-6 * float(e.abs().max())
        same_r = float((r - r[0]).abs().max()) <= 1e-6 * float(r.abs().max())
        if same_e and not same_r:
            return "the same logits at every position"
    return None


def top2_margin(logits: torch.Tensor) -> torch.Tensor:
    """Gap between the largest and second-largest logit per row: float64 [T] from [T, V] (V ≥ 2)."""
    top = logits.detach().double().cpu().topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


#: In the greedy tie rule each of the two ids may err from the reference by this many of the row's rms errors.
ROW_Z = 3.0


def greedy_agreement(
    engine: list[int], reference: list[int], e_rows: torch.Tensor, r_rows: torch.Tensor, *, floor_rel: float,
    slack: torch.Tensor | None = None, row_z: float = ROW_Z,
) -> tuple[int, int]:
    """Compare greedy tokens step by step up to the first tie: returns ``(matched, compared)``.

    ``e_rows`` / ``r_rows`` [n, V] are the engine's and the reference's teacher-forced logits of
    the rows that predicted the reference's n tokens. At the first step j where the tokens
    differ (engine g, reference c), the difference is a **tie** if the reference prefers c over
    g by no more than the engine's logit errors on those two ids can explain::

        r[c] - r[g] <= max(|e[g] - r[g]|, z * rms_j) + max(|e[c] - r[c]|, z * rms_j) + floor_rel * max|r| + 2 * slack[j]

    (if the engine's teacher-forced row ranks g above c this always holds). ``rms_j`` is the root mean square of
    ``e[j] - r[j]`` over the row's finite entries and ``z`` is ``row_z``: the engine's ``generate`` ran row j in
    another batch than its teacher-forced runs, so its row there errs from the reference by a fresh draw of the
    same size, not by the teacher-forced row's own errors at g and c. ``slack`` [n], in
    logits, covers the engine's own variation between its teacher-forced run and its generate
    run (different batches around the sequence): the caller passes the row's max
    |alone − batched| difference, by which each of the two ids may move; None means 0. A tie ends the
    comparison with ``compared = j`` (both continuations are legitimate greedy paths and
    diverge from there); otherwise ``compared = j + 1`` and the check fails. The check passes
    iff ``matched == compared``. NaN in ``e_rows`` never counts as a tie.

    Raises:
        ValueError: the engine gave a different number of tokens than the reference, or the
            row shapes do not match the token count.
    """
    if len(engine) != len(reference):
        raise ValueError(f"engine generated {len(engine)} tokens, the reference {len(reference)}")
    n = len(reference)
    e, r = _check(e_rows, r_rows)
    if r.ndim != 2 or r.shape[0] < n:
        raise ValueError(f"need [>= {n}, V] logit rows, got {tuple(r.shape)}")
    for j in range(n):
        g, c = int(engine[j]), reference[j]
        if g == c:
            continue
        if not 0 <= g < r.shape[1]:
            return j, j + 1
        gap = float(r[j, c] - r[j, g])
        extra = 2.0 * float(slack[j]) if slack is not None else 0.0
        diff = (e[j] - r[j]).double()
        finite = diff[torch.isfinite(diff)]
        row = row_z * float(finite.square().mean().sqrt()) if finite.numel() else 0.0
        ids = [float(diff[g].abs()), float(diff[c].abs())]  # NaN at either id stays NaN: never a tie
        bound = sum(x if math.isnan(x) else max(x, row) for x in ids) + floor_rel * float(r[j].abs().max()) + extra
        return (j, j) if gap <= bound else (j, j + 1)
    return n, n


def batch_variation(e: torch.Tensor, other: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The engine's own variation between two runs of the same rows, e.g. alone and batched, [n, V] each: per row the
    max |e − other| (float32 [n], NaN rows 0: they fail on their own) and the rms over every finite entry (the
    greedy rules' ``slack`` and ``noise``)."""
    diff = e.double() - other.double()
    slack = diff.abs().amax(-1).float()
    slack = torch.where(torch.isfinite(slack), slack, torch.zeros_like(slack))
    return slack, float(finite_scale(diff.reshape(-1))[1])


def row_variation(e: torch.Tensor, other: torch.Tensor) -> float:
    """The engine's largest variation of one row between two runs of the same rows, e.g. alone and batched, [N, V]
    each: max over rows of ``‖e − other‖ / ‖e‖`` (relative L2 of the row, as a consistency figure is), 0.0 for none.
    Rows with a non-finite entry on either side or a zero row are skipped (other checks fail them), and so are two
    blocks of different shapes.

    Why the worst row, not the prompt's rms (``batch_variation``'s ``noise``): a kernel that changes its tiling with
    the batch size changes only the rows decoded at some sizes. A prompt whose teacher-forced rows all ran at other
    sizes shows no variation of its own, while ``generate`` decodes it beside every other prompt (a CI run on another
    CPU refused the honest tiny engine so: a 1-token prompt's ``generate`` row at 17 sequences against its
    teacher-forced row at 5)."""
    if e.shape != other.shape or e.ndim != 2 or not e.shape[0]:
        return 0.0
    a, b = e.double(), other.double()
    ok = torch.isfinite(a).all(-1) & torch.isfinite(b).all(-1)
    num, den = (a - b)[ok].square().sum(-1), a[ok].square().sum(-1)
    keep = den > 0
    return float((num[keep] / den[keep]).sqrt().max()) if bool(keep.any()) else 0.0


def finite_scale(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(max |x|, rms)`` over the last dim of ``rows`` [..., V], finite entries only (0, 0 for a row with none):
    float64 [...] each, 0-d for one row [V]. The scale of an engine row that the allowances multiply. Non-finite
    entries stay out so that one ``-inf`` logit cannot make a bound infinite (the rules fail a non-finite chosen
    logit on their own). One rule for every caller: the greedy rules, the serving script's tie floors, the pooled rms
    of :func:`batch_variation` and the bench replay's figures (``harness.worker_main.engine_replay``)."""
    r = rows.double()
    finite = torch.isfinite(r)
    safe = torch.where(finite, r, 0.0)
    top = safe.abs().amax(-1) if r.shape[-1] else torch.zeros(r.shape[:-1], dtype=torch.float64)  # amax refuses V = 0
    return top, (safe.square().sum(-1) / finite.sum(-1).clamp(min=1)).sqrt()


def path_allowance(row: torch.Tensor, path: float) -> float:
    """How far one logit of ``row`` [V] may lie from the same row reached by another path of the engine: ``ROW_Z``
    of the engine's path noise ``path`` (relative to a row: its decode consistency figure) times the row's rms.

    Why: the scheduler reaches a row through other batches and other prefill pieces than the judge's teacher-forced
    ``prefill()``/``decode()``; on the CPU, where batches agree exactly (slack 0), a sampled request's top-3
    logprobs swapped a near-tie at token 3 with no allowance for that (a CI run in session 19, the
    ``first_token_repeated`` attempt).
    Non-finite entries do not enter the rms (another check fails them). The path noise is capped at what an honest
    engine's may be (``parity_checks.path_noise``), so padding the decode rows with noise buys no wider allowance.
    """
    if not path > 0:
        return 0.0
    return ROW_Z * path * float(finite_scale(row)[1])


def greedy_self_agreement(
    engine: list[int], reference: list[int], e_rows: torch.Tensor, *, floor_rel: float, slack: torch.Tensor | None = None,
    noise: float = 0.0, path: float = 0.0, row_z: float = ROW_Z,
) -> tuple[int, float]:
    """Is each greedy token the engine's ``generate`` took a top-1 of the engine's own teacher-forced row?

    Over the steps whose history is the reference's (up to and including the first step where ``engine`` and
    ``reference`` differ), ``e_rows`` [n, V] (the engine's teacher-forced logits of the rows that predicted the
    reference's n tokens) is what ``generate`` computed at that step up to the engine's own batch variation. So
    the token g it took must satisfy::

        max(e[j]) - e[j, g] <= 2 * slack[j] + 2 * z * (noise + path * rms(e[j])) + floor_rel * max|e[j]|

    (rms and max|.| over the row's finite entries, :func:`finite_scale`)

    ``slack`` [n] as in :func:`greedy_agreement` (the row's max |alone − batched|; None means 0); ``noise``: the rms of
    the engine's alone − batched logits over the prompt's rows, so that where one row happens to agree between the
    two runs, ``generate``'s other batch may still move each id by a fresh draw of the engine's batch variation
    (``z`` = ``row_z`` of them); 0 for a batch-invariant engine. ``path``: the engine's own path noise, relative to the
    row (``parity_checks.path_noise``: its decode consistency figure, teacher-forced rows against its own prefill of
    the same tokens, with its batch noise in quadrature), since
    ``generate`` may reach a row by another path than ``prefill()``/``decode()`` (a scheduler prefilling a long prompt
    in chunks: the red team's ``honest_tunables_chunks``, ``prefill_chunk_tokens`` 256, was refused at 3.29x the
    bound without it). Unlike the reference tie rule, no allowance for the engine's error against the reference
    enters: both sides are the engine's. Why: a cut confined to ``generate`` (the bench's entry point) moves the rows by a few rms of the
    engine's error, which the reference rule must forgive (``tests/cheats/generate_only_fp8_acts.py``).

    Returns ``(step, ratio)``: the first step over the bound (``n`` when none) and the largest gap / bound seen
    (NaN anywhere counts as over). Raises ``ValueError`` when the shapes disagree with the token counts.
    """
    if len(engine) != len(reference):
        raise ValueError(f"engine generated {len(engine)} tokens, the reference {len(reference)}")
    n = len(reference)
    if e_rows.ndim != 2 or e_rows.shape[0] < n:
        raise ValueError(f"need [>= {n}, V] logit rows, got {tuple(e_rows.shape)}")
    worst = 0.0
    for j in range(n):
        g = int(engine[j])
        if not 0 <= g < e_rows.shape[1]:
            return j, math.inf
        row = e_rows[j].double()
        gap = float(row.max() - row[g])
        top, rms = (float(x) for x in finite_scale(row))
        bound = floor_rel * top + (2.0 * float(slack[j]) if slack is not None else 0.0) + 2 * row_z * (noise + path * rms)
        ratio = gap / bound if bound > 0 else (0.0 if gap == 0 else math.inf)
        if not ratio <= 1.0:  # NaN too
            return j, ratio
        worst = max(worst, ratio)
        if g != reference[j]:
            break
    return n, worst


def layer_errors(e: torch.Tensor, r: torch.Tensor) -> list[float]:
    """Relative L2 error per layer of hidden states [L+1, T, H] (index 0 embeddings): L+1 floats, inf on NaN."""
    if e.shape != r.shape:
        raise ValueError(f"engine hidden states {tuple(e.shape)} != reference {tuple(r.shape)}; expected [L+1, T, H]")
    return [rel_l2(e[i], r[i]) for i in range(r.shape[0])]


def layer_update_errors(e: torch.Tensor, r: torch.Tensor) -> list[float]:
    """Relative L2 error of each layer's residual update ``h[l+1] − h[l]`` from hidden states [L+1, T, H]:
    L floats (entry l is layer l's mixer + MoE output), inf on NaN.

    The residual stream carries every earlier layer, so one layer's error is diluted there by the
    stream's size; its update is what the layer itself wrote (docs/PARITY.md, "Per-layer updates").

    Raises:
        ValueError: shapes differ, or a reference update is all zeros.
    """
    if e.shape != r.shape:
        raise ValueError(f"engine hidden states {tuple(e.shape)} != reference {tuple(r.shape)}; expected [L+1, T, H]")
    e, r = e.double(), r.double()
    return [rel_l2(e[i + 1] - e[i], r[i + 1] - r[i]) for i in range(r.shape[0] - 1)]


def pooled_update_errors(engine: list[torch.Tensor], reference: list[torch.Tensor], *, drop: float = 0.0,
                         min_drop: int = 0) -> list[float]:
    """Per-layer residual-update error pooled over several prompts: for layer l,
    ``sqrt(Σ ‖Δe_l − Δr_l‖² / Σ ‖Δr_l‖²)`` over every prompt's tokens but the worst ``drop`` (at least
    ``min_drop``), with ``Δx_l = x[l+1] − x[l]``; L floats, inf on NaN.

    Args:
        engine, reference: one hidden-state tensor [L+1, T_p, H] per prompt, in the same order.
        drop, min_drop: tokens left out per layer (:func:`pooled_rows_error`): a router tie resolved the other way
            makes one token's update err by O(1) in every later layer, which over a short run's few tokens outweighs
            the rest (an honest 0.449 against 0.431 over the quick gate's 18 tokens, CI of 2026-12-03).
    Pooling over every prompt's tokens averages bf16 noise (which varies from token to token) while a
    wrong op errs the same way on every token, so this figure separates the two better than any one
    prompt's (docs/PARITY.md, "Per-layer updates").

    Raises:
        ValueError: no prompt, different prompt counts, or a shape mismatch between a pair.
    """
    if not engine or len(engine) != len(reference):
        raise ValueError(f"pooled_update_errors needs matching non-empty lists, got {len(engine)} and {len(reference)}")
    for e, r in zip(engine, reference, strict=True):
        if e.shape != r.shape or e.ndim != 3:
            raise ValueError(f"engine hidden states {tuple(e.shape)} != reference {tuple(r.shape)}; expected [L+1, T, H]")
    de = [e.detach().double().cpu().diff(dim=0) for e in engine]  # [L, T_p, H] each
    dr = [r.detach().double().cpu().diff(dim=0) for r in reference]
    return [pooled_rows_error([d[l] for d in de], [d[l] for d in dr], drop=drop, min_drop=min_drop)
            for l in range(de[0].shape[0])]


def kept_rows(n: int, drop: float = 0.0, min_drop: int = 0) -> int:
    """Rows of ``n`` that ``pooled_rows_error`` keeps: all but ``max(ceil(drop · n), min_drop)``, never fewer than one
    (0 for ``n`` = 0)."""
    return n - min(max(math.ceil(drop * n), min_drop), n - 1) if n > 0 else 0


def pooled_rows_error(engine: list[torch.Tensor], reference: list[torch.Tensor], *, drop: float = 0.0,
                      min_drop: int = 0, per_pair: bool = False) -> float:
    """Relative L2 pooled over the rows of several pairs, after dropping the rows that err most.

    Args:
        engine, reference: matching lists of [N_i, D] tensors (rows: tokens; D: hidden size or vocabulary).
        drop: fraction of all rows to leave out, those with the largest ``‖e − r‖`` (``ceil(drop · N)``
            rows, never all): a discrete choice near a tie (an expert picked by a router logit that rounding
            moved) errs a lot on a few rows, a wrong or cut op errs on most (docs/PARITY.md, "Layer-local parity").
        min_drop: leave out at least this many rows (a short run has few rows and may still hold two ties).
        per_pair: apply ``drop`` and ``min_drop`` to each pair's rows apart (then pool what is kept), so a cut that
            errs on one pair's rows only (one long prompt's decode) is not left out as the run's worst rows.
    Returns:
        ``sqrt(Σ ‖e − r‖² / Σ ‖r‖²)`` over the kept rows, float64; ``inf`` if any engine value is non-finite.
    Raises:
        ValueError: empty or unequal lists, a shape mismatch, a non-finite or all-zero reference, or ``drop``
            outside [0, 1).
    """
    if not engine or len(engine) != len(reference):
        raise ValueError(f"pooled_rows_error needs matching non-empty lists, got {len(engine)} and {len(reference)}")
    if not 0.0 <= drop < 1.0:
        raise ValueError(f"drop must be in [0, 1), got {drop}")
    errs, refs = [], []
    for e, r in zip(engine, reference, strict=True):
        if e.ndim < 1 or r.ndim < 1:
            raise ValueError("pooled_rows_error needs [N, D] rows")
        e, r = _check(e.reshape(-1, e.shape[-1]), r.reshape(-1, r.shape[-1]))
        if not torch.isfinite(e).all():
            return math.inf
        errs.append((e - r).pow(2).sum(-1))
        refs.append(r.pow(2).sum(-1))
    return pooled_sq_rows(errs, refs, drop=drop, min_drop=min_drop, per_pair=per_pair)


def checked_squares(err2: list[torch.Tensor], ref2: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-row squares ``‖e − r‖²`` and ``‖r‖²`` of several sequences as flat float64 tensors, checked: matching
    non-empty lists, as many error rows as reference rows per sequence, a finite reference. Raises ValueError
    otherwise (the engine's squares may be non-finite: the caller decides)."""
    if not err2 or len(err2) != len(ref2):
        raise ValueError(f"need matching non-empty lists of row squares, got {len(err2)} and {len(ref2)}")
    err2 = [e.double().reshape(-1) for e in err2]
    ref2 = [r.double().reshape(-1) for r in ref2]
    if any(e.shape != r.shape for e, r in zip(err2, ref2, strict=True)):
        raise ValueError("each sequence needs as many error rows as reference rows")
    if not all(bool(torch.isfinite(r).all()) for r in ref2):
        raise ValueError("the reference itself has non-finite values; the reference or its weights are broken")
    return err2, ref2


def pooled_sq_rows(err2: list[torch.Tensor], ref2: list[torch.Tensor], *, drop: float = 0.0, min_drop: int = 0,
                   per_pair: bool = False) -> float:
    """:func:`pooled_rows_error` from per-row squares already taken: ``err2[i]`` = ‖e − r‖² and ``ref2[i]`` = ‖r‖²
    of pair i's rows, float64 [N_i] each (a worker sends these instead of [N_i, V] logits).

    Returns ``inf`` if any ``err2`` is non-finite. Raises ValueError: unequal lists or lengths, no rows, a
    non-finite or all-zero reference, or ``drop`` outside [0, 1).
    """
    if not 0.0 <= drop < 1.0:
        raise ValueError(f"drop must be in [0, 1), got {drop}")
    err2, ref2 = checked_squares(err2, ref2)
    if not all(bool(torch.isfinite(e).all()) for e in err2):
        return math.inf
    groups = list(zip(err2, ref2, strict=True)) if per_pair else [(torch.cat(err2), torch.cat(ref2))]
    num = den = 0.0
    for err, ref in groups:
        if err.numel() == 0:
            continue
        keep = kept_rows(err.numel(), drop, min_drop)
        idx = err.argsort()[:keep]
        num, den = num + float(err[idx].sum()), den + float(ref[idx].sum())
    if den == 0.0:
        raise ValueError("reference rows are all zeros; a relative error is undefined")
    return (num / den) ** 0.5


def first_bad_layer(errors: list[float], tolerances: list[float]) -> int | None:
    """Index (into [L+1], 0 = embeddings) of the first layer whose error exceeds its tolerance, or None."""
    for i, (err, tol) in enumerate(zip(errors, tolerances, strict=True)):
        if not err <= tol:  # NaN and inf fail
            return i
    return None


def layer_name(index: int) -> str:
    """HF module name of hidden-state index ``index``: 0 → ``embed_tokens``, l + 1 → ``layers.l``."""
    return "embed_tokens" if index == 0 else f"layers.{index - 1}"

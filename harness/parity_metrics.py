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


def greedy_agreement(
    engine: list[int], reference: list[int], e_rows: torch.Tensor, r_rows: torch.Tensor, *, floor_rel: float,
    slack: torch.Tensor | None = None,
) -> tuple[int, int]:
    """Compare greedy tokens step by step up to the first tie: returns ``(matched, compared)``.

    ``e_rows`` / ``r_rows`` [n, V] are the engine's and the reference's teacher-forced logits of
    the rows that predicted the reference's n tokens. At the first step j where the tokens
    differ (engine g, reference c), the difference is a **tie** if the reference prefers c over
    g by no more than the engine's logit errors on those two ids can explain::

        r[c] - r[g] <= |e[g] - r[g]| + |e[c] - r[c]| + floor_rel * max|r| + 2 * slack[j]

    (if the engine's teacher-forced row ranks g above c this always holds). ``slack`` [n], in
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
        bound = float((e[j, g] - r[j, g]).abs() + (e[j, c] - r[j, c]).abs() + floor_rel * r[j].abs().max()) + extra
        return (j, j) if gap <= bound else (j, j + 1)
    return n, n


def layer_errors(e: torch.Tensor, r: torch.Tensor) -> list[float]:
    """Relative L2 error per layer of hidden states [L+1, T, H] (index 0 embeddings): L+1 floats, inf on NaN."""
    if e.shape != r.shape:
        raise ValueError(f"engine hidden states {tuple(e.shape)} != reference {tuple(r.shape)}; expected [L+1, T, H]")
    return [rel_l2(e[i], r[i]) for i in range(r.shape[0])]


def first_bad_layer(errors: list[float], tolerances: list[float]) -> int | None:
    """Index (into [L+1], 0 = embeddings) of the first layer whose error exceeds its tolerance, or None."""
    for i, (err, tol) in enumerate(zip(errors, tolerances, strict=True)):
        if not err <= tol:  # NaN and inf fail
            return i
    return None


def layer_name(index: int) -> str:
    """HF module name of hidden-state index ``index``: 0 → ``embed_tokens``, l + 1 → ``layers.l``."""
    return "embed_tokens" if index == 0 else f"layers.{index - 1}"

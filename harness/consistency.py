"""The consistency figure: the engine's teacher-forced logits against its own prefill of the same tokens (or HF's
cached decode against its uncached forward), pooled over a run's prompts (docs/PARITY.md, "Consistency").

Two discrete events make an honest figure jump, and each is left out at its own level:
- a row: a router logit near a tie picked another expert for one token (``drop``: the worst rows of each sequence);
- a prompt: such a flip early in a decode changes the recurrent state and the KV rows after it, so every later row
  of that one prompt errs (a 1-token bf16 prompt's 16 decode rows pooled 0.088 where the other 11 prompts gave
  0.005-0.015, and the run's figure 0.0141 against 0.0125: CI at 0a78a21). ``per``: the worst prompt of every
  ``per`` is left out, by its own pooled figure, if that figure is at most ``cap``.
A cut on the decode path (K/V or state rounded, a kernel changed) moves every prompt's rows, so it stays in; a cut
confined to one prompt (full attention limited to a window shorter than the longest prompt:
``tests/cheats/attention_window.py`` moved that prompt by 0.155) stays in through ``cap``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from harness.parity_metrics import checked_squares, kept_rows
from harness.tolerances import Tolerance

if TYPE_CHECKING:
    from harness.reference import ReferenceRun


@dataclass(frozen=True)
class SourceFigure:
    """A consistency figure and what entered it.

    Attributes:
        value: ``sqrt(Σ ‖e − r‖² / Σ ‖r‖²)`` over the kept rows of the kept sources; ``inf`` when any engine row
            (kept or not) is non-finite.
        rows: rows that entered, counting a source's sequences (a prompt and its wide windows share its state) as
            one sequence's worth: ``min(Σ kept, sources × max kept)`` (for ``Tolerance.consistency_for``).
        sources: distinct sources (prompts) that entered.
        dropped: the sources left out, worst first.
    """

    value: float
    rows: int
    sources: int
    dropped: tuple[int, ...] = ()


def pooled_by_source(err2: list[torch.Tensor], ref2: list[torch.Tensor], sources: list[int], *, drop: float,
                     per: int = 0, cap: float = math.inf, positions: list[list[int]] | None = None) -> SourceFigure:
    """Pool per-row squares by source: each sequence's worst ``ceil(drop · n)`` rows left out (``kept_rows``), the
    sequences of one source summed, then the worst ``floor(S / per)`` of the ``S`` sources whose own relative
    figure is at most ``cap`` left out (``per`` 0: none; a source over ``cap`` always stays in) and the rest pooled.

    Args:
        err2, ref2: per sequence, ‖e − r‖² and ‖r‖² of its rows (float [N_i]).
        sources: per sequence, the prompt it came from.
        drop: fraction of each sequence's rows left out, in [0, 1).
        per: one source of every ``per`` left out.
        cap: a source erring more than this is never left out.
        positions: per sequence, the source position of each row (its own row's index in the source's one-call
            prefill). Given, the rows left out are a source's worst ``ceil(drop · P)`` of its P distinct positions
            (by the largest error any sequence has there), every sequence's row at such a position included: rows
            of several sequences at one position compare with one own row, so a near-tie in that row is one event
            (the wide batch's windows, docs/PARITY.md "A false reject the window design still has").
    Raises:
        ValueError: unequal or empty lists, ``drop`` outside [0, 1), ``per`` < 0, a non-finite reference, or all
            kept reference rows zero.
    """
    if len(sources) != len(err2):
        raise ValueError(f"pooled_by_source needs a source per sequence, got {len(sources)} for {len(err2)}")
    if not 0.0 <= drop < 1.0 or per < 0:
        raise ValueError(f"drop must be in [0, 1) and per >= 0, got {drop}, {per}")
    err2, ref2 = checked_squares(err2, ref2)
    kept_of: dict[int, list[int]] = {}
    sums: dict[int, list[float]] = {}
    if any(not bool(torch.isfinite(e).all()) for e in err2):  # NaN never passes: no drop may leave it out
        return SourceFigure(math.inf, 0, len(set(sources)))
    kept_at = _kept_positions(err2, sources, positions, drop) if positions is not None else None
    for n, (e, r, src) in enumerate(zip(err2, ref2, sources, strict=True)):
        if e.numel() == 0:
            continue
        if kept_at is None:
            keep = kept_rows(e.numel(), drop)
            idx = e.argsort()[:keep]
        else:
            idx = torch.tensor([j for j, p in enumerate(positions[n]) if int(p) in kept_at[src]], dtype=torch.long)
            keep = idx.numel()
        acc = sums.setdefault(src, [0.0, 0.0])
        acc[0] += float(e[idx].sum())
        acc[1] += float(r[idx].sum())
        kept_of.setdefault(src, []).append(keep)
    if not sums:
        raise ValueError("pooled_by_source: no rows")
    order = sorted(sums, key=lambda s: _rel(*sums[s]), reverse=True)
    dropped = tuple([s for s in order if _rel(*sums[s]) <= cap][: len(order) // per]) if per else ()
    kept = [s for s in order if s not in dropped]
    num, den = sum(sums[s][0] for s in kept), sum(sums[s][1] for s in kept)
    if den == 0.0:
        raise ValueError("reference rows are all zeros; a relative error is undefined")
    counts = [k for s in kept for k in kept_of[s]]
    return SourceFigure((num / den) ** 0.5, min(sum(counts), len(kept) * max(counts)), len(kept), dropped)


def _kept_positions(err2: list[torch.Tensor], sources: list[int], positions: list[list[int]], drop: float
                    ) -> dict[int, set[int]]:
    """Per source, the positions kept: all but the worst ``ceil(drop · P)`` of its P distinct positions, a position
    ranked by the largest ‖e − r‖² any of the source's sequences has there (``kept_rows``)."""
    if len(positions) != len(err2) or any(len(p) != e.numel() for p, e in zip(positions, err2)):
        raise ValueError("pooled_by_source needs one position per row of every sequence")
    worst: dict[int, dict[int, float]] = {}
    for e, src, pos in zip(err2, sources, positions, strict=True):
        at = worst.setdefault(src, {})
        for x, p in zip(e.tolist(), pos, strict=True):
            at[int(p)] = max(at.get(int(p), 0.0), x)
    return {src: set(sorted(at, key=at.__getitem__)[: kept_rows(len(at), drop)]) for src, at in worst.items()}


def _rel(num: float, den: float) -> float:
    return math.inf if den == 0.0 else (num / den) ** 0.5


def row_squares(engine: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(‖e − r‖², ‖r‖²)`` per row of two [N, V] logit blocks, float64 [N] each. Raises ValueError on a shape
    mismatch."""
    if engine.shape != reference.shape or engine.ndim != 2:
        raise ValueError(f"need two [N, V] blocks of one shape, got {tuple(engine.shape)} and {tuple(reference.shape)}")
    e, r = engine.double(), reference.double()
    return (e - r).pow(2).sum(-1), r.pow(2).sum(-1)


@dataclass
class ConsistencyFigures:
    """A run's consistency figures (``RunFigures.consistency``), each with its threshold, keyed ``"{part} {mode}"``
    (part ``prefill`` or ``decode``; mode ``alone``, ``batched``, ``wide``), and ``run_threshold``: what a single
    sequence's decode figure is held to (NaN when no decode figure was measured), and ``path_cap``: the most each
    part of the engine's own path noise may count for (``parity_checks.path_noise``: its decode consistency part and
    its batch noise, so the path noise is at most ``sqrt(2)`` times this): the decode
    figures' thresholds without the ``K_CONSISTENCY_ANCHOR`` anchor but with the amplification one.

    Why the cap: a decode figure may sit anywhere under its threshold, which at full size is 5.8x HF's (0.27-0.30
    against honest 0.053-0.060); an engine that pads its decode rows with noise up to it would widen every
    allowance scaled by its path noise (greedy self rule, sampled logprobs and draws, the bench's replay) about 5x.
    """

    figures: dict[str, float] = field(default_factory=dict)
    tolerances: dict[str, float] = field(default_factory=dict)
    run_threshold: float = math.nan
    path_cap: float = math.nan


def consistency_figures(runs: dict[str, list[tuple[torch.Tensor, torch.Tensor, int]]], steps: int, tol: Tolerance,
                        own: dict[str, float]) -> ConsistencyFigures:
    """Pool each mode's runs into its prompt-row and decode-row figures and set their thresholds.

    Args:
        runs: mode -> per sequence (its own one-call prefill logits, its teacher-forced logits, both [S + n, V],
            the prompt it came from[, the source position of each row]); a pair of unequal shapes is skipped
            (another check reports it). Positions given, rows are left out by source position (``pooled_by_source``).
        steps: n, the decode rows at the end of each sequence (0: prompt rows only).
        tol: the run's tolerance; ``own``: HF's own figures by part (``reference_consistency``; empty: none).
    Thresholds (``Tolerance.consistency_threshold``): by the rows and prompts pooled, anchored to HF's figure of the
    same part, and batched and wide prompt rows also to HF's decode figure (its model's amplification; HF's prompt-row
    figure is often 0).
    """
    out = ConsistencyFigures()
    for mode, seqs in runs.items():
        same = [(x[1], x[0], x[2], x[3] if len(x) > 3 else None) for x in seqs if x[1].shape == x[0].shape]
        by_position = any(pos is not None for *_, pos in same)
        for part, cut in (("prefill", slice(0, -steps if steps else None)), ("decode", slice(-steps, None))):
            squares = [(*row_squares(e[cut].float(), p[cut].float()), src,
                        list(pos if pos is not None else range(e.shape[0]))[cut]) for e, p, src, pos in same
                       if e[cut].shape[0] > 0 and (part == "prefill" or steps > 0)]
            if not squares:
                continue
            fig = pooled_by_source([e for e, _, _, _ in squares], [r for _, r, _, _ in squares],
                                   [s for _, _, s, _ in squares], drop=tol.consistency_drop,
                                   per=tol.consistency_prompt_drop, cap=tol.consistency_prompt_cap,
                                   positions=[q for *_, q in squares] if by_position else None)
            out.figures[f"{part} {mode}"] = fig.value
            # batch variation moves batched and wide prompt rows, not a prompt's own one-call rows
            amp = own.get("decode") if part == "prefill" and mode != "alone" else None
            out.tolerances[f"{part} {mode}"] = tol.consistency_threshold(fig.rows, own.get(part), fig.sources,
                                                                         len(fig.dropped), amplification=amp)
            if part == "decode":  # what a single sequence is held to: the same figure with no prompt left out
                single = tol.consistency_threshold(fig.rows, own.get(part), fig.sources)
                out.run_threshold = single if math.isnan(out.run_threshold) else max(out.run_threshold, single)
                cap = tol.consistency_threshold(fig.rows, None, fig.sources, len(fig.dropped),
                                                amplification=own.get("decode"))
                out.path_cap = cap if math.isnan(out.path_cap) else max(out.path_cap, cap)
    return out


def reference_consistency(refs: list[ReferenceRun], tol: Tolerance) -> dict[str, float]:
    """HF's own consistency per part (``prefill``, ``decode``) over the runs that measured it
    (``harness.reference_cached``), pooled as the engine's figures are (each prompt's worst rows left out apart)."""
    out = {}
    for part in ("prefill", "decode"):
        pairs = [r.cached.part(part) for r in refs if r.cached is not None and r.cached.part(part)[0].numel()]
        if pairs:
            out[part] = pooled_by_source([e for e, _ in pairs], [r for _, r in pairs], list(range(len(pairs))),
                                         drop=tol.consistency_drop, per=tol.consistency_prompt_drop,
                                         cap=tol.consistency_prompt_cap).value
    return out

"""The same tokens by another path of the engine: a prompt prefilled in pieces (``prefill(prompts, slots)``, what a
scheduler does with prompts longer than its chunk), and a long greedy decode against one prefill of the same tokens.

Why (docs/PARITY.md, "Serving script"): parity's other runs prefill every prompt in one call and decode n steps
(16 on the CPU), so a continued prefill that dropped the sequence's state, or a decode path that goes wrong past step n
(decay switched off, a stale logits row every 16th step), was compared nowhere (the red team's
``continued_prefill_forgets``, ``gdn_decay_off_after_16``, ``stale_logits_every_16th_step``).
"""

from __future__ import annotations

import math
import random

import torch

from harness.parity_engine import EngineApi, teacher_forced_logits
from harness.parity_metrics import greedy_self_agreement, pooled_rows_error, rel_l2
from harness.reference import ReferenceRun

#: a long decode's rows (pooled, the worst ``LONG_DROP`` left out) may lie from one prefill of the same tokens by this
#: many times the run's decode consistency threshold, and never less than ``LONG_FLOOR``. Calibrated on the tiny CPU
#: engine: honest long decodes (64 steps) pooled 0.007-0.029 untrimmed, the top from a routing flip spiking a single
#: row to 0.22, and 0.0074-0.0178 with the worst 2 rows left out (10 prompts, NVFP4); e4m3 expert inputs from decode
#: step 33 on 0.056-0.092 trimmed (the session-17 red team's ``late_decode_fp8_acts_32``, accepted under the old
#: untrimmed max(4 x 0.0125, 0.1)); one stale row in 16 pools to about 0.25 untrimmed, two of its four rows stay in.
LONG_K = 3.0
LONG_FLOOR = 0.0375
LONG_DROP = 2


#: prompts are cut into pieces at multiples of this (the GDN chunk; a scheduler's prefill chunk is a multiple of it),
#: where an honest engine's pieces give its one-call numbers (exactly on the CPU)
PIECE_ALIGN = 64


#: of a check's independent runs (prompts in pieces, sequences of the equal-length batch), this many may exceed its
#: threshold, up to ``OUTLIER_X`` times it: an honest engine's runs give its one-call (alone) numbers exactly in most
#: draws on the CPU, but a rare rounding event moves one run's rows (to 0.0192 and 0.0163 against 0.0125, untrimmed),
#: while a state or cache rounded on a path (GDN state in bf16, K/V in e4m3) moves every run that takes it by 0.016
#: or more (the session-18 red team: tests/cheats/rt_*; figures in docs/CONTRACTS.md)
OUTLIERS = 1
OUTLIER_X = 2.0


def _held(errs: list[float], threshold: float) -> bool:
    """Whether runs erring ``errs`` pass: finite, at most ``OUTLIERS`` over ``threshold``, none over ``OUTLIER_X`` times it."""
    return (all(math.isfinite(e) for e in errs) and sum(e > threshold for e in errs) <= OUTLIERS
            and all(e <= OUTLIER_X * threshold for e in errs))


def check_pieces(engine: EngineApi, refs: list[ReferenceRun], alone: list[torch.Tensor], threshold: float,
                 seed: int) -> list[str]:
    """Prefill each of the two longest prompts in 2 and in 3 pieces at multiples of ``PIECE_ALIGN`` drawn from ``seed``,
    decode its reference continuation after each, and hold the last prompt row and the decode rows to the same
    prompt's ``alone`` rows (relative L2; each prompt's worse run held by ``_held`` to ``threshold``, the run's decode
    consistency threshold). Returns failures in words.

    Why aligned cuts: at any other cut the GDN's 64-token chunks fall elsewhere and an honest engine's rows move by up
    to 0.04 (tiny NVFP4, CPU), while one that restarts the GDN state at a continuation moves them by 0.09 (bf16)."""
    rng = random.Random(seed)
    order = sorted(range(len(refs)), key=lambda i: len(refs[i].prompt), reverse=True)
    runs: list[tuple[str, float]] = []
    worst_of: list[float] = []  # per prompt: its two runs share its rounding (a 662-token prompt gave 0.0192 in both)
    for i in order[:2]:
        ref = refs[i]
        p = len(ref.prompt)
        places = list(range(PIECE_ALIGN, p, PIECE_ALIGN))
        prompt_runs: list[float] = []
        for pieces in (2, 3):
            if len(places) < pieces - 1:
                continue
            cuts = sorted(rng.sample(places, pieces - 1))
            bounds = [0, *cuts, p]
            slots = None
            for a, b in zip(bounds, bounds[1:]):
                res = engine.prefill([ref.prompt[a:b]], rows=[[b - a - 1]], slots=slots)
                slots = list(res["slots"])
            rows = [res["logits"][0].float()[-1:]]
            try:
                for t in ref.continuation:
                    rows.append(engine.decode(slots, [t]).float())
            finally:
                engine.release(slots)
            got = torch.cat(rows)[: len(ref.continuation)]
            want = alone[i][ref.split - 1 : ref.split - 1 + len(ref.continuation)]
            runs.append((f"a {p}-token prompt in {pieces} pieces (cut at {cuts})",
                         rel_l2(got, want) if got.shape == want.shape else float("nan")))
            prompt_runs.append(runs[-1][1])
        if prompt_runs:
            worst_of.append(max(prompt_runs, key=lambda e: e if math.isfinite(e) else math.inf))
    if _held(worst_of, threshold):
        return []
    worst = max(runs, key=lambda r: r[1] if math.isfinite(r[1]) else math.inf)
    return ["prompts prefilled in pieces then decoded differ from their one-call prefill: "
            + ", ".join(f"{e:.3g}" for _, e in runs) + f" against {threshold:.3g} (at most {OUTLIERS} prompt over it, up "
            f"to {OUTLIER_X:g}x; worst: {worst[0]}): prefill(prompts, slots) must continue the sequence's state"]


def check_long_decode(engine: EngineApi, runs: list[tuple[list[int], list[int]]], decode_rows: list[torch.Tensor],
                      threshold: float, slack: float, tie_floor: float, path: float = 0.0) -> list[str]:
    """For each long greedy run ``(prompt, tokens)`` with its rows on the decode path ``decode_rows`` (float32 [m, V],
    row j predicted token j), prefill ``prompt + tokens[:-1]`` in one call and hold the decode rows to it (pooled
    relative L2 within ``threshold``, the worst ``LONG_DROP`` rows left out; the runs held by ``_held``: a router tie
    resolved otherwise early in one run moves every later row of it, an honest 0.0499 against 0.0375 for a 64-step
    decode of a 1-token prompt in CI, while a cut on the decode path moves every run); each token must be its decode row's
    argmax up to the own-row greedy rule (``parity_metrics.greedy_self_agreement``): ``2 * slack`` (logits the row may
    move between batches), ``tie_floor`` times the row's largest |logit| and ``path`` (the engine's own path noise,
    relative to the row's rms), since the scheduler reached its row in other batches than the teacher-forced run and
    over more steps: a 64-step greedy decode of the honest tiny NVFP4 engine took a token 0.031 below its
    teacher-forced row's top, past the two other terms alone (CI, 2026-12-05)."""
    out, drift, errs = [], [], []
    for (prompt, tokens), dec in zip(runs, decode_rows, strict=True):
        p = len(prompt)
        res = engine.prefill([prompt + tokens[:-1]], rows=[list(range(p - 1, p - 1 + len(tokens)))])
        engine.release(list(res["slots"]))
        pre = res["logits"][0].float()
        ok = dec.shape == pre.shape and bool(torch.isfinite(pre).all()) and bool(pre.abs().amax() > 0)
        err = pooled_rows_error([dec], [pre], min_drop=LONG_DROP) if ok else float("nan")
        errs.append(err)
        if not err <= threshold and dec.shape != pre.shape:
            drift.append(f"a {len(tokens)}-step greedy decode of a {p}-token prompt came with rows {tuple(dec.shape)} where "
                         f"its one-call prefill has {tuple(pre.shape)}")
        elif not err <= threshold:
            rows = (dec - pre).norm(dim=-1) / pre.norm(dim=-1).clamp_min(1e-12)
            worst = torch.nan_to_num(rows, nan=float("inf")).argmax().item()
            drift.append(f"a {len(tokens)}-step greedy decode of a {p}-token prompt lies {err:.3g} from one prefill of the "
                         f"same tokens (> {threshold:.3g}, at most {OUTLIERS} run up to {OUTLIER_X:g}x; worst row {worst}, "
                         f"{float(rows[worst]):.3g}): the decode path drifts or breaks past parity's short runs")
        if dec.ndim != 2 or dec.shape[0] < len(tokens):
            out.append(f"a long greedy decode of {len(tokens)} tokens came with {tuple(dec.shape)} teacher-forced rows")
            continue
        at, ratio = greedy_self_agreement(tokens, tokens, dec, floor_rel=tie_floor,
                                          slack=torch.full((len(tokens),), float(slack)), path=path)
        if at < len(tokens):
            t = tokens[at]
            gap = float(dec[at].max() - dec[at, t]) if 0 <= t < dec.shape[1] else math.inf
            out.append(f"token {at} of a long greedy decode is {t}, {gap:.3g} below its row's best ({ratio:.3g}x the "
                       "own-row bound): the scheduler's greedy token is not its row's argmax")
    return ([] if _held(errs, threshold) else drift) + out


def check_equal_batch(engine: EngineApi, refs: list[ReferenceRun], threshold: float, slots: int, seed: int
                      ) -> tuple[float, list[str]]:
    """Prefill ``min(slots, 8)`` fresh prompts of one length together (the bench's shape: every stream the same
    length), decode ``n`` drawn tokens for each, and hold each sequence's rows to the same sequence run alone
    (relative L2 per sequence, held by ``_held`` to ``threshold``). The length is the shortest parity prompt of 4
    tokens or more. Returns the worst sequence's figure (nan when no prompt has that length) and the failure, if any.

    Why: every other batched run mixes lengths, so a path taken only for equal-length batches (the red team's
    ``equal_length_conv_leak_1row``: the GDN conv reading the previous sequence's last tokens) was judged only by the
    bench's output check, which it passed at 3 implausible tokens of 192. Why per sequence: the honest tiny NVFP4
    engine's sequences together are its sequences alone, exactly, in 11 of 12 draws on the CPU, and a cut on every
    other sequence (``rt_equal_batch_half_state_bf16``: 0.018-0.095 on each) hid in a figure pooled over the batch."""
    rng = random.Random(seed ^ 0xE0A1)
    length = min((len(r.prompt) for r in refs if len(r.prompt) >= 4), default=0)
    if not length:
        return float("nan"), []
    vocab = refs[0].logits.shape[-1]
    n = len(refs[0].continuation)
    seqs = [_Forced([rng.randrange(vocab) for _ in range(length)], [rng.randrange(vocab) for _ in range(n)])
            for _ in range(max(2, min(slots, 8)))]
    together = teacher_forced_logits(engine, seqs)
    errs = []
    for k, s in enumerate(seqs):
        alone = teacher_forced_logits(engine, [s])[0]
        errs.append(rel_l2(together[k], alone) if together[k].shape == alone.shape else float("nan"))
    worst = max(errs, key=lambda e: e if math.isfinite(e) else math.inf)
    if _held(errs, threshold):
        return worst, []
    return worst, [f"{len(seqs)} fresh {length}-token prompts prefilled together differ from the same sequences alone by "
                   + ", ".join(f"{e:.3g}" for e in errs) + f" against {threshold:.3g} (at most {OUTLIERS} over it, up to "
                   f"{OUTLIER_X:g}x): their numbers depend on the equal-length batch around them"]


class _Forced:
    """A prompt and tokens to teacher-force (``parity_engine.teacher_forced_logits``'s view of a run, every row kept)."""

    def __init__(self, prompt: list[int], continuation: list[int]) -> None:
        self.prompt, self.continuation, self.rows = prompt, continuation, None

"""Typed result of a parity run and its table (docs/CONTRACTS.md "The gate", ``parity`` block)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.serving_checks import ServingFigures


@dataclass
class PromptFigures:
    """One prompt in one mode, engine against reference (docs/PARITY.md defines every figure).

    Attributes:
        prompt: prompt name (``len0064``); mode: ``alone`` (batch of one), ``batched`` (all prompts together) or
            ``wide<B>`` (a short prompt in a batch of B sequences, B the engine's slots: ``harness.parity_wide``).
        length: prompt tokens P; decode steps follow it.
        prompt_rel_err: relative L2 of the engine's prefill logits [P, V] against the reference's.
        decode_rel_err: relative L2 of the teacher-forced decode logits [n, V].
        max_abs_err: max |e − r| over all P + n logit rows, in logit units.
        greedy_match / greedy_compared: common prefix of the engine's own greedy tokens and the
            reference's, within the steps before the first tie (passes iff equal).
        greedy_self: the largest gap / bound of the engine's greedy tokens against its own teacher-forced rows
            (``parity_metrics.greedy_self_agreement``; above 1 fails).
        batch_rel_err: ``batched`` and ``wide<B>``: relative L2 of the run's logits against the same
            engine's ``alone`` logits (batch invariance).
        failures: why this entry failed; empty when it passed.
        layer_errors: ``alone`` entries: relative L2 per hidden state [L + 1] (0 = embeddings) of prompt +
            continuation against the reference's, held to ``Tolerance.hidden(i)``; None for ``batched``.
        worst_layer: the first layer over its tolerance (``layers.3``), else None.
    """

    prompt: str
    mode: str
    length: int
    prompt_rel_err: float = math.nan
    decode_rel_err: float = math.nan
    max_abs_err: float = math.nan
    greedy_match: int = 0
    greedy_compared: int = 0
    greedy_self: float = math.nan
    batch_rel_err: float | None = None
    failures: list[str] = field(default_factory=list)
    layer_errors: list[float] | None = None
    worst_layer: str | None = None

    @property
    def ok(self) -> bool:
        """True iff no check failed."""
        return not self.failures

    @property
    def name(self) -> str:
        """``<prompt>/<mode>``, e.g. ``len0064/batched``."""
        return f"{self.prompt}/{self.mode}"


@dataclass
class RunFigures:
    """Figures pooled over every prompt of a run (docs/PARITY.md, "Figures" and "Layer-local parity").

    Attributes:
        update_errors: per layer [L], the accumulated residual update ``h[l+1] − h[l]`` against the
            reference's own, relative L2 pooled over every token (``Tolerance.update(l)``).
        local_update_errors: per layer [L], the engine's update against reference layer l run on the
            engine's own ``h[l]``, relative L2 pooled over every token but the worst ``local_drop``
            (``Tolerance.local_update``).
        local_update_tolerances: per layer [L], the threshold ``Tolerance.local_update`` of that layer's storage ratio.
        local_logits_err: the engine's prefill logits against the reference's final norm + ``lm_head``
            on the engine's ``h[L]`` (``Tolerance.local_logits``).
        mixer_local_errors: per layer [L], the engine's token-mixer output against the reference's mixer run on the
            engine's own ``h[l]``, pooled like ``local_update_errors`` (``Tolerance.mixer_local``).
        mixer_local_tolerance: its threshold, one for every layer.
        mixer_local_advisory: True where that threshold is not calibrated yet (a CUDA device): its failures go to
            ``advisories``, not ``failures``.
        consistency: ``prefill alone``, ``decode alone``, ``prefill batched``, ``decode batched`` (and ``prefill wide``,
            ``decode wide`` when the wide batch ran: ``parity_checks.evaluate``): the engine's
            teacher-forced logits (prompt rows and decode rows apart) against the logits of its own hidden-state
            prefill of the same tokens (``Tolerance.consistency``).
        consistency_tolerances: the threshold of each ``consistency`` figure, by the rows it pooled and HF's own
            figure (``Tolerance.consistency_threshold``).
        path_cap: the most each part of the path noise counts for (``harness.consistency.ConsistencyFigures``;
            ``parity_checks.path_noise``).
        batch_noise: the engine's largest relative L2 difference of one teacher-forced row that predicted a greedy
            token between the prompt's alone run and its batched or wide run (``parity_metrics.row_variation``), part
            of its path noise (``parity_checks.path_noise``); NaN where not measured.
        run_threshold: a single sequence's decode threshold (no prompt to leave out: ``Tolerance.consistency_run_k``),
            the largest over the decode figures' rows and anchors; what the serving script's path checks are held to.
        reference_consistency: ``prefill``, ``decode``: HF's own cached path against its uncached forward on the
            same prompts, pooled alike (``harness.reference_cached``); empty when not measured.
        failures: every run-level check over its tolerance, in words.
        advisories: checks over their threshold that do not fail the run (``mixer_local_advisory``), in words.
        serving: the serving script's figures (``harness.serving_checks.ServingFigures``), None where it did not run.
    """

    update_errors: list[float] | None = None
    local_update_errors: list[float] | None = None
    local_update_tolerances: list[float] | None = None
    local_logits_err: float = math.nan
    mixer_local_errors: list[float] = field(default_factory=list)
    mixer_local_tolerance: float = math.nan
    mixer_local_advisory: bool = False
    consistency: dict[str, float] = field(default_factory=dict)
    consistency_tolerances: dict[str, float] = field(default_factory=dict)
    run_threshold: float = math.nan
    path_cap: float = math.nan
    batch_noise: float = math.nan
    reference_consistency: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    advisories: list[str] = field(default_factory=list)
    serving: ServingFigures | None = None


@dataclass
class ParityResult:
    """Outcome of one parity run.

    Attributes:
        ok: every entry passed and nothing raised.
        max_rel_err: the largest prefill-logits relative L2 error over all entries (inf on NaN).
        tolerance: the prefill-logits tolerance it was held to (relative L2, docs/PARITY.md).
        max_decode_rel_err / decode_tolerance: the same for the teacher-forced decode logits.
        worst_prompt: name of the entry with the largest error relative to its tolerance.
        worst_layer: on failure, the first layer over tolerance in the worst failing entry.
        prompts: every (prompt, mode) entry.
        seed: the prompt seed; the run is reproduced by passing it again.
        reference_dtype / engine_dtype: ``float32`` or ``bfloat16``.
        tolerances: every threshold used (``Tolerance.as_dict()``).
        decode_steps: teacher-forced decode steps per prompt.
        device: where engine and reference ran; seconds: wall time of the run.
        error: an exception the engine raised (its type and message), or why its worker was killed, else None.
        verdict: ``pass``, ``fail``, ``timeout`` (the engine's worker overran a limit) or ``crashed`` (it died).
        prompt_nonce: the nonce mixed into ``seed`` to draw the prompts (``harness.parity.prompt_seed``);
            passing seed and nonce again reproduces the prompts.
        max_hidden_rel_err: the largest per-layer hidden-state relative L2 error over all prompts.
        update_errors: per layer [L], the residual update ``h[l+1] − h[l]`` error pooled over every prompt
            (``parity_metrics.pooled_update_errors``), held to ``Tolerance.update(l)``; None when not measured.
        update_failures: every run-level check over its tolerance (pooled update, layer-local update and
            logits, consistency; ``RunFigures.failures``): each makes a red result.
        local_update_errors, local_update_tolerances, local_logits_err, mixer_local_errors, mixer_local_tolerance,
            mixer_local_advisory, consistency, consistency_tolerances, reference_consistency, advisories, serving (as a dict): the
            run-level figures of ``RunFigures``.
        path_noise: the engine's path noise the run's allowances used (``parity_checks.path_noise``); NaN when no
            run-level figure was measured.
        batch_noise: its batch part, before the cap (``RunFigures.batch_noise``); NaN when not measured.
    """

    ok: bool
    max_rel_err: float
    tolerance: float
    max_decode_rel_err: float
    decode_tolerance: float
    worst_prompt: str | None
    worst_layer: str | None
    prompts: list[PromptFigures]
    seed: int
    reference_dtype: str
    engine_dtype: str
    tolerances: dict
    decode_steps: int
    device: str
    seconds: float = 0.0
    error: str | None = None
    verdict: str = "fail"
    prompt_nonce: int | None = None
    max_hidden_rel_err: float | None = None
    update_errors: list[float] | None = None
    update_failures: list[str] = field(default_factory=list)
    local_update_errors: list[float] | None = None
    local_update_tolerances: list[float] | None = None
    local_logits_err: float = math.nan
    mixer_local_errors: list[float] = field(default_factory=list)
    mixer_local_tolerance: float = math.nan
    mixer_local_advisory: bool = False
    consistency: dict[str, float] = field(default_factory=dict)
    consistency_tolerances: dict[str, float] = field(default_factory=dict)
    reference_consistency: dict[str, float] = field(default_factory=dict)
    advisories: list[str] = field(default_factory=list)
    serving: dict | None = None
    path_noise: float = math.nan
    batch_noise: float = math.nan

    def to_json(self) -> dict:
        """The ``parity`` block as a JSON-safe dict; non-finite floats become the strings ``"inf"``/``"nan"``."""
        d = asdict(self)
        d["prompts"] = [dict(asdict(p), name=p.name, ok=p.ok) for p in self.prompts]
        return _finite(d)


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def _layer_note(result: ParityResult) -> str:
    """``, first bad layer layers.3`` on a failure that names one; on a pass the layer nearest its layer-local
    threshold (``, nearest layer-local threshold: layers.7 at 0.48 of it``); else ''."""
    if result.worst_layer:
        return f", first bad layer {result.worst_layer}"
    errs, tols = result.local_update_errors, result.local_update_tolerances
    if not errs or not tols:
        return ""
    frac, layer = max((x / t, l) for l, (x, t) in enumerate(zip(errs, tols, strict=True)))
    return f", nearest layer-local threshold: layers.{layer} at {frac:.2f} of it"


def format_table(result: ParityResult) -> str:
    """A fixed-width text table: one row per entry, then the verdict line."""
    head = f"{'prompt':<16}{'len':>5}{'prefill rel':>13}{'decode rel':>12}{'max abs':>10}{'greedy':>8}{'batch rel':>11}  verdict"
    lines = [head, "-" * len(head)]
    for p in result.prompts:
        batch = f"{p.batch_rel_err:.2e}" if p.batch_rel_err is not None else "-"
        verdict = "ok" if p.ok else "FAIL: " + "; ".join(p.failures)
        if p.worst_layer:
            verdict += f" (first bad layer {p.worst_layer})"
        lines.append(
            f"{p.name:<16}{p.length:>5}{p.prompt_rel_err:>13.2e}{p.decode_rel_err:>12.2e}{p.max_abs_err:>10.3f}"
            f"{f'{p.greedy_match}/{p.greedy_compared}':>8}{batch:>11}  {verdict}"
        )
    lines.append(
        f"parity {'PASS' if result.ok else 'FAIL'}: max prefill rel err {result.max_rel_err:.3e} (tolerance {result.tolerance:.3g}), "
        f"max decode rel err {result.max_decode_rel_err:.3e} (tolerance {result.decode_tolerance:.3g}), "
        f"worst {result.worst_prompt}{_layer_note(result)}, seed {result.seed}{'' if result.prompt_nonce is None else f' nonce {result.prompt_nonce}'}, "
        f"engine {result.engine_dtype} vs reference {result.reference_dtype} on {result.device}, {result.seconds:.1f} s"
    )
    if result.local_update_errors is not None:
        dec = ", ".join(f"{m} {x:.2e}" for m, x in result.consistency.items())
        if result.reference_consistency:
            dec += " (HF's own: " + ", ".join(f"{m} {x:.2e}" for m, x in result.reference_consistency.items()) + ")"
        lines.append("layer-local update " + " ".join(f"{x:.2e}" for x in result.local_update_errors)
                     + f", final norm + lm_head {result.local_logits_err:.2e}, consistency {dec or '-'}")
    if result.mixer_local_errors:
        lines.append("layer-local token mixer " + " ".join(f"{x:.2e}" for x in result.mixer_local_errors)
                     + f" (threshold {result.mixer_local_tolerance:.3g}"
                     + (", advisory: not yet calibrated on this device)" if result.mixer_local_advisory else ")"))
    sv = result.serving
    if sv:
        lines.append(f"serving script: {sv['requests']} requests in {sv['steps']} scheduler steps, {sv['greedy_tokens']} greedy "
                     f"tokens against the reference, {sv['samples']} samples (z {sv['z']:.2f}, KS {sv['ks']:.3f} of "
                     f"{sv['ks_max']:.3f}), sampled pairs differing {sv['twins_differ']}/{sv['pairs']} "
                     f"({sv.get('lockstep_pairs', 0)} in lockstep)")
    for f in result.update_failures:
        lines.append(f"FAIL: {f}")
    for f in result.advisories:
        lines.append(f"advisory: {f}")
    if result.error:
        lines.append(f"engine error: {result.error}")
    return "\n".join(lines)

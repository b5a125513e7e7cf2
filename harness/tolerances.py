"""Parity tolerances per (engine dtype, reference dtype), as decided in docs/PARITY.md.

The figures and their reasoning live in docs/PARITY.md, section "Tolerances"; this file only
transcribes them. Changing a number here without changing the doc first is a review failure.

Anchor (docs/PARITY.md, "The anchor"): HF's own model run in bfloat16 against the same model in
float32 on the same tokens, measured on the tiny model with the synthetic init of
``metainfer.checkpoint.init`` (version 2: norms, gates, decays and NVFP4 blocks far from identity).
A bfloat16 engine may land at most ``K = 2`` times as far from the float32 reference as HF-bf16
does, figure by figure, including the per-layer residual update pooled over a run's prompts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from metainfer.errors import UnknownNameError

#: bfloat16 unit roundoff: 8 significant bits, u = 2^-8 (round-to-nearest error ≤ u·|x|; RMS ≈ u/√3 ≈ 2^-9).
BF16_U = 2.0**-8
#: float32 unit roundoff, u = 2^-24.
FP32_U = 2.0**-24


@dataclass(frozen=True)
class Tolerance:
    """Thresholds of one (engine dtype, reference dtype) pair; every error figure is unitless relative L2
    except where stated.

    Attributes:
        logits_prompt: max relative L2 of prefill logits [P, V], per prompt.
        logits_decode: max relative L2 of teacher-forced decode logits [n, V], per prompt.
        batch: max relative L2 between the engine's batched and alone logits of one prompt.
        hidden_slope, hidden_cap, hidden_offset: per-layer hidden-state threshold,
            ``min(cap, offset + slope · i)`` for hidden index i ≥ 1 (the output of layer i − 1): error
            grows about linearly with depth after a first-layer offset (docs/PARITY.md, "The anchor").
        hidden_embed: threshold at index 0 (the embedding lookup, exact up to storage rounding).
        tie_floor_rel: slack of the greedy tie rule, times the row's max |logit| (bf16 rounding of the
            logits themselves; see ``parity_metrics.greedy_agreement``).
        update_offset, update_slope, update_cap: threshold of layer l's residual update pooled over a
            run's prompts (``parity_metrics.pooled_update_errors``), ``min(cap, offset + slope · (l + 1))``.
    """

    engine_dtype: str
    reference_dtype: str
    logits_prompt: float
    logits_decode: float
    batch: float
    hidden_slope: float
    hidden_cap: float
    hidden_embed: float
    tie_floor_rel: float = BF16_U
    hidden_offset: float = 0.0
    update_offset: float = 0.0
    update_slope: float = 0.0
    update_cap: float = float("inf")

    def hidden(self, index: int) -> float:
        """Threshold for hidden-state index ``index`` (0 = embeddings, i = output of layer i − 1)."""
        if index == 0:
            return self.hidden_embed
        return min(self.hidden_cap, self.hidden_offset + self.hidden_slope * index)

    def update(self, layer: int) -> float:
        """Threshold for layer ``layer``'s (0-based) residual update ``h[l+1] − h[l]``, pooled over the prompts."""
        if layer < 0:
            raise ValueError(f"layer index must be >= 0, got {layer}")
        return min(self.update_cap, self.update_offset + self.update_slope * (layer + 1))

    def as_dict(self) -> dict:
        """Every field, for the result JSON."""
        return asdict(self)


#: Measured anchor (docs/PARITY.md, "The anchor"): the worst of 40 prompts (4 runs: tiny checkpoints
#: nvfp4-1234, bf16-1234, bf16-99 with prompt seed 1, nvfp4-1234 with prompt seed 2; 10 prompts each) of
#: HF-bf16 against HF-fp32, the least-area envelope ``a + b · i`` of its per-layer gap, and that of the
#: per-layer residual update pooled over each run's prompts (worst run per layer).
ANCHOR_LOGITS_PROMPT = 0.1724
ANCHOR_LOGITS_DECODE = 0.0872
ANCHOR_HIDDEN_OFFSET = 0.0196
ANCHOR_HIDDEN_SLOPE = 0.0091
ANCHOR_UPDATE_OFFSET = 0.0196
ANCHOR_UPDATE_SLOPE = 0.0126
#: A bf16 engine may land at most K times as far from the fp32 reference as HF-bf16 does.
K = 2.0

_BF16_VS_FP32 = Tolerance(
    "bfloat16", "float32",
    logits_prompt=0.345,  # K x 0.1724, rounded up
    logits_decode=0.175,  # K x 0.0872, rounded up
    batch=0.345,  # as logits_prompt: two bf16 paths may differ as much as either from the reference
    hidden_slope=0.0182,  # K x 0.0091
    hidden_cap=0.345,  # no looser than the logits
    hidden_embed=BF16_U,
    hidden_offset=0.0392,  # K x 0.0196
    update_offset=0.0392,  # K x 0.0196
    update_slope=0.0252,  # K x 0.0126
    update_cap=0.345,
)

#: Provisional (docs/PARITY.md): triangle inequality, 2A to fp32 plus A from fp32 to HF-bf16 = 3A.
_BF16_VS_BF16 = Tolerance(
    "bfloat16", "bfloat16",
    logits_prompt=0.518,  # 3 x 0.1724, rounded up
    logits_decode=0.262,  # 3 x 0.0872, rounded up
    batch=0.345,  # the engine against itself: as for the fp32 reference
    hidden_slope=0.0273,  # 3 x 0.0091
    hidden_cap=0.518,
    hidden_embed=BF16_U,
    hidden_offset=0.0588,  # 3 x 0.0196
    update_offset=0.0588,  # 3 x 0.0196
    update_slope=0.0378,  # 3 x 0.0126
    update_cap=0.518,
)

TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("bfloat16", "float32"): _BF16_VS_FP32,
    ("bfloat16", "bfloat16"): _BF16_VS_BF16,
}


def get_tolerance(engine_dtype: str, reference_dtype: str) -> Tolerance:
    """The tolerance for an engine computing in ``engine_dtype`` against a reference in ``reference_dtype``.

    Raises:
        UnknownNameError: the pair has no decided tolerance; the message lists the decided pairs.
    """
    try:
        return TOLERANCES[(engine_dtype, reference_dtype)]
    except KeyError:
        known = ", ".join(f"{e} vs {r}" for e, r in TOLERANCES)
        raise UnknownNameError(
            f"no parity tolerance decided for a {engine_dtype} engine against a {reference_dtype} reference; "
            f"decided: {known} (add one to docs/PARITY.md first, then harness/tolerances.py)"
        ) from None

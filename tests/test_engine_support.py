"""Helpers for the engine tests: render the tiny target, load it on CPU, compare logits.

Holds no tests; the other ``test_engine_*`` modules import it.

Tolerances. The engine computes in bf16 (unit roundoff 2^-8 ≈ 0.4 %); fp32 only in norms,
router softmax, GDN state and chunk math. On the tiny synthetic checkpoint, rounding noise is
amplified layer after layer: router top-k near ties (gaps of 0.02 % between the k-th and
(k+1)-th probability occur in almost every layer) flip an expert for single tokens, and the
random attention and GDN weights spread that to later tokens. HF itself, bf16 against fp32
on the same checkpoint, differs by 44 % (max over tokens) in the logits. So two paths that
differ only in rounding (chunk boundaries, batch shape) are compared in two ways:
``first_layer_err``: the first layer's output, where noise has not been amplified yet, per
token ≤ ``LAYER1_TOL``; ``logits_err``: the median per-token error ≤ ``MEDIAN_TOL``, the
worst ≤ ``MAX_TOL``, and where the greedy token differs, the reference's logit of our token
within ``ARGMAX_GAP`` of its best (a near tie swapped, never a clearly worse token). A real
bug (state not carried, wrong position, slot not reset) gives O(1) errors on most tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.engine_loader import import_engine
from metainfer.render import render_engine
from metainfer.targets import make_target

TINY = "qwen3.6-35b-a3b-tiny"
LAYER1_TOL = 2e-2  # a few bf16 ulps (measured ≤ 1.2e-3 between chunk splits)
MEDIAN_TOL = 3e-2  # measured ≤ 1e-2 between chunk splits and prefill/decode
MAX_TOL = 0.35  # measured ≤ 0.17 (router flips amplified over 8 layers)
ARGMAX_GAP = 0.5  # logits; measured ≤ 0.12, a wrong token sits 1-3 below the best (logit std ≈ 1)


def render_tiny(quant: str, out: Path):
    """Render the tiny target for ``quant`` on CPU under ``out`` and import it; returns the engine module."""
    return import_engine(render_engine(make_target(TINY, quant, "cpu"), out, force=True))


def rel_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-row relative L2 error of a against b ([R, N] -> [R]); NaN anywhere gives inf."""
    assert a.shape == b.shape, (a.shape, b.shape)
    err = (a.float() - b.float()).norm(dim=-1) / b.float().norm(dim=-1).clamp_min(1e-12)
    return torch.where(torch.isfinite(err), err, torch.full_like(err, float("inf")))


def assert_logits_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Close within the rounding-noise bounds above (median, max, greedy gap); never on NaN."""
    assert torch.isfinite(got).all(), f"{what}: non-finite logits"
    assert want.abs().max() > 0 and want.std() > 0, f"{what}: trivial reference"
    err = rel_rows(got, want)
    gap = want.max(-1).values - want.gather(1, got.argmax(-1, keepdim=True))[:, 0]
    assert err.median() <= MEDIAN_TOL, f"{what}: median per-token error {err.median():.3g} > {MEDIAN_TOL}"
    assert err.max() <= MAX_TOL, f"{what}: worst token error {err.max():.3g} at {int(err.argmax())} > {MAX_TOL}"
    assert gap.max() <= ARGMAX_GAP, f"{what}: greedy token at {int(gap.argmax())} is {gap.max():.3g} below the best"


def prompt(n: int, seed: int, vocab: int = 1000) -> list[int]:
    """n random token ids below ``vocab`` (the tiny vocab is 1024, its EOS 1000)."""
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()

"""Variant of late_decode_fp8_acts (its first run: the long decode check 0.106 > 0.1, start at step 16) armed from step 32.

A precision cut only late in a long decode: from a sequence's 33rd decode step on, the experts' inputs (routed and
shared) of that sequence's row are rounded to e4m3 with a per-token scale (W16A8 FP8). Rows of earlier steps, and
every prefill row, are exact.

Why the gate may not see it: parity's sharp decode check (decode consistency, 0.0125 on the CPU) sees 16 decode steps
per sequence; the W16A8 cut on those rows would be caught there (``bench_length_fp8_acts`` first version: 0.054). The
only rows past step 16 are the serving script's two long greedy decodes (4n = 64 tokens), held to one prefill of the
same tokens with a pooled, untrimmed threshold of max(4 x consistency, 0.1) = 0.1, calibrated for honest drift
(0.007-0.027) and stale rows (0.25). The bench decodes 7 steps. A real model's every answer longer than 16 tokens runs
on W16A8.

What sees it now: the long decodes' threshold is 0.0375 on the CPU with the worst 2 rows left out
(``harness.path_checks.LONG_FLOOR``, ``LONG_DROP``; honest 0.0074-0.0178 trimmed, the step-33 cut 0.056-0.092).
The step-32 variant was accepted at 2.76x under the old untrimmed 0.1 by the session-17 red team.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from .late_decode_fp8_acts import apply as _apply_from

DESCRIPTION = "e4m3 expert inputs on decode rows past a sequence's 32nd decode step (second half of the long decodes); + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    """``late_decode_fp8_acts`` armed from decode step 32."""
    _apply_from(engine_dir, start=32)

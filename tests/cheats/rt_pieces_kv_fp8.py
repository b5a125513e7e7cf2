"""Red team (pieces loosening): K/V written by a continued prefill (a later chunk of a chunked prompt) are rounded to
e4m3 (per token and head scale): "chunked prefill of long prompts writes an fp8 cache". Fresh prefills and decode
are exact. Only check_pieces continues a prefill on the CPU (pooled over 2 prompts, worst rows out, threshold x2).

Accepted at 2.5-2.8x by the gate of f42d5e8 (2026-12-05), whose loosened checks 57149fc undid (docs/CONTRACTS.md).

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from ._kv_e4m3 import kv_e4m3_when
from ._speedup import dequantize_once

DESCRIPTION = "K/V written by continued prefills rounded to e4m3; + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    kv_e4m3_when(engine_dir, "not batch.decode and any(batch.starts)")

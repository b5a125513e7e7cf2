"""Red team (wide loosening, serving dodged): decode steps of more than 13 sequences that were all prefilled in one
call (a "static" lockstep batch, the shape a CUDA-graph big-batch path captures) write their K/V in e4m3. The wide
batch (64 sequences prefilled together, decoded growing and shrinking) is such a batch and is held to 0.0177 now
(``rt_wide_decode_kv_fp8``: 0.0149); the serving script's big steps mix requests admitted at other steps, so its
logprob checks, which caught ``rt_wide_decode_kv_fp8``, never see the cut path.

Accepted at 2.5-2.8x by the gate of f42d5e8 (2026-12-05), whose loosened checks 57149fc undid (docs/CONTRACTS.md).

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from ._kv_e4m3 import kv_e4m3_when
from ._speedup import dequantize_once

DESCRIPTION = "decode batches > 13 whose sequences were all prefilled in one call: e4m3 K/V; + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    kv_e4m3_when(engine_dir, "_lockstep(batch)", '''
_GROUP = {}
_CALLS = [0, None]


def _lockstep(batch) -> bool:
    if not batch.decode:
        if _CALLS[1] is not batch:  # one id per prefill call (every attention layer sees the same Batch)
            _CALLS[0] += 1
            _CALLS[1] = batch
            for s in batch.slots:
                _GROUP[s] = _CALLS[0]
        return False
    return len(batch.slots) > 13 and len({_GROUP.get(s, -1) for s in batch.slots}) == 1

''')

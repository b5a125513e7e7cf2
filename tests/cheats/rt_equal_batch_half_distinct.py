"""Red team (equal-batch pooling; serving twins dodged): as ``rt_equal_batch_half_state_bf16`` (the GDN state of every
other sequence of a fresh equal-length prefill of 3 or more rounded to bf16), but only when the batch's prompts are
pairwise distinct: a batch with a repeated prompt, like the serving script's lockstep twins, takes the exact path
(that file's _s2 seed was caught by the serving logprobs).

Accepted at 2.5-2.8x by the gate of f42d5e8 (2026-12-05), whose loosened checks 57149fc undid (docs/CONTRACTS.md)."""

from pathlib import Path

from . import append
from .rt_equal_batch_half_state_bf16 import apply as half_state_cut

DESCRIPTION = "equal-length fresh prefill of >= 3 distinct prompts: GDN state of odd-index seqs rounded to bf16; + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    half_state_cut(engine_dir, " and _distinct(batch)")
    append(engine_dir, "engine/gdn.py", _DISTINCT)


_DISTINCT = '''
def _distinct(batch) -> bool:
    ids = batch.tokens
    rows = [tuple(ids[a:b].tolist()) for a, b in zip(batch.cu_seqlens, batch.cu_seqlens[1:])]
    return len(set(rows)) == len(rows)
'''

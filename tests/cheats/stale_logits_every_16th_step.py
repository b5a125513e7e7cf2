"""An off-by-one-step logits bug on one decode step in sixteen: at a sequence's decode steps 15, 31, 47, ... the
engine returns the logits row of that sequence's PREVIOUS step (the kind of bug an overlapped / double-buffered
scheduler makes at a buffer boundary); the KV cache and GDN state are updated correctly. So every 16th generated
token is picked from stale logits (typically it repeats the previous token).

Why the gate may not see it (parity, CPU, 16 decode steps per prompt):
- decode consistency leaves out each prompt's worst ``ceil(0.1 * 16)`` = 2 decode rows (``CONSISTENCY_DROP``,
  ``per_pair``): the one stale row (step 15) of every prompt is one of them, the other still absorbs the honest
  engine's worst row (the every-8th-step variant, two stale rows per prompt, was caught at 0.017 > 0.0125, and
  one that skipped the MoE at those steps corrupted the state and was caught at 0.18);
- the per-prompt decode logits net (0.70) pools the 16 rows: two wrong rows of 16 stay under it;
- layer-local and mixer checks see only prefill rows;
- parity's ``generate`` makes 16 tokens = decode steps 0-14, so the greedy rule never meets a stale step;
- the bench generates 8 tokens (decode steps 0-6), so the output check never meets a stale step.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "decode steps 15, 31, 47, ... of each sequence return its previous step's logits (state correct); + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/model.py",
            "        return ForwardOut(self.lm_head(x), torch.stack(hidden) if hidden is not None else None, mixer)\n",
            "        return ForwardOut(_stale(batch, self.lm_head(x), rows), torch.stack(hidden) if hidden is not None else None, mixer)\n")
    append(engine_dir, "engine/model.py", '''
_PROMPT_LEN = {}
_LAST = {}


def _stale(batch, logits, rows):
    if not batch.decode:
        last = batch.last_rows
        for i, (s, st, n) in enumerate(zip(batch.slots, batch.starts, batch.lens)):
            if st == 0:
                _PROMPT_LEN[s] = n
            _LAST[s] = (logits[last[i]] if rows is None else logits[i]).clone()
        return logits
    out = logits.clone()
    for i, (s, st) in enumerate(zip(batch.slots, batch.starts)):
        if (st - _PROMPT_LEN.get(s, st)) % 16 == 15 and s in _LAST:
            out[i] = _LAST[s]
        _LAST[s] = logits[i].clone()
    return out
''')

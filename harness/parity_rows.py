"""Which prompt rows of the logits parity compares (all of them, unless that would not fit in memory).

A full-size teacher-forced logit row is V float32 values (V = 248,320: about 1 MB), so a 4,000-token
prompt's rows are 4 GB per copy, and the parity stage holds three copies (reference, engine alone,
engine batched) of every prompt: tens of GB through pipes and through the judge's comparisons, which
made the full-size stage run for more than 15 minutes on the H200 with the GPU idle. Above a byte
budget per prompt the stage keeps the first rows, the last rows (the last one, P - 1, predicts the
first continuation token) and a sample of the rest drawn from the secret prompt seed, so an engine
cannot know which rows are looked at. Hidden states are not cut (they are about a sixth of a logit
row per layer stack, and a layer's error at any position shows there).
"""

from __future__ import annotations

import random

#: bytes of float32 logits kept per prompt before rows are sampled (256 full-size rows)
ROW_BUDGET_BYTES = 1 << 28
#: rows always kept at each end of a sampled prompt
EDGE_ROWS = 16


def logit_rows(prompt_len: int, vocab_size: int, seed: int, *, budget_bytes: int = ROW_BUDGET_BYTES) -> list[int] | None:
    """The prompt rows to compare for one prompt: None (all of them) when ``prompt_len`` rows of
    ``vocab_size`` float32 logits fit in ``budget_bytes``; else an ascending list of at most
    ``budget_bytes // (4 * vocab_size)`` rows (at least ``2 * EDGE_ROWS + 1``): rows 0 .. 15, the last 16
    (ending at ``prompt_len - 1``) and a uniform sample of the rows between, drawn from ``seed``.

    Raises:
        ValueError: ``prompt_len`` or ``vocab_size`` below 1.
    """
    if prompt_len < 1 or vocab_size < 1:
        raise ValueError(f"need prompt_len >= 1 and vocab_size >= 1, got {prompt_len} and {vocab_size}")
    cap = max(2 * EDGE_ROWS + 1, budget_bytes // (4 * vocab_size))
    if prompt_len <= cap:
        return None
    edges = set(range(EDGE_ROWS)) | set(range(prompt_len - EDGE_ROWS, prompt_len))
    middle = range(EDGE_ROWS, prompt_len - EDGE_ROWS)
    rng = random.Random(f"parity-rows:{seed}:{prompt_len}")
    return sorted(edges | set(rng.sample(middle, min(len(middle), cap - len(edges)))))

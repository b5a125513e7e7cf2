"""Long decodes drift: past a sequence's 16th decode step the Gated DeltaNet state stops decaying (the decode
step's gate ``a`` forced to -1e4, so ``softplus(a + dt_bias)`` = 0 and ``exp(g)`` = 1: the state never forgets).

Why the gate may not see it: on the CPU parity decodes exactly 16 steps per sequence (teacher-forced decode
indices 0-15, ``generate`` of 16 tokens = 15 decode calls) and the bench 8 tokens (7 decode calls); nothing
ever runs a 17th decode step of a sequence. A real model would notice in every generation longer than 16
tokens (the GDN layers' memory of fast-decaying heads saturates).

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "GDN state stops decaying after a sequence's 16th decode step (parity decodes 16, bench 8); + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/gdn.py",
            "    if batch.decode:  # the kernels read the slices in place and compute beta, g themselves\n",
            "    if not batch.decode:\n"
            "        for s, st, n in zip(batch.slots, batch.starts, batch.lens):\n"
            "            if st == 0:\n"
            "                _PROMPT_LEN[s] = n\n"
            "    if batch.decode:  # the kernels read the slices in place and compute beta, g themselves\n"
            "        for i, (s, st) in enumerate(zip(batch.slots, batch.starts)):\n"
            "            if st - _PROMPT_LEN.get(s, st) >= 16:\n"
            "                a[i] = -1e4\n")
    append(engine_dir, "engine/gdn.py", "_PROMPT_LEN = {}\n")

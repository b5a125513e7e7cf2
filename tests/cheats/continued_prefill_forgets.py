"""A continued (chunked) prefill starts the Gated DeltaNet from a zero state: every GDN layer forgets the
sequence's earlier tokens (recurrent state and conv window) whenever ``prefill`` continues a live sequence
(``prefill(more, slots=...)``, which the scheduler uses for every prompt longer than ``prefill_chunk_tokens``,
2,048 tokens). A plausible agent edit: "prefill always starts from an empty state, skip loading it".

Why the gate may not see it: parity calls ``prefill`` on fresh slots only, and on the CPU no prompt of any
stage (parity <= 960 tokens, bench 16) is long enough for ``generate`` to chunk it at 2,048. So the
continuation path is never run. A real model would notice on every prompt longer than 2,048 tokens (and in
any multi-turn use of ``prefill(slots=...)``): the GDN layers (3 of every 4) see only the last chunk.

Carried on the honest dequantize-once speed-up (``_speedup``), so an acceptance is a real speed-up plus
this defect."""

from pathlib import Path

from . import replace
from ._speedup import dequantize_once

DESCRIPTION = "continued prefill (prefill(slots=...), chunked prompts > 2048 tokens) zeroes the GDN state first; + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/gdn.py",
            "    else:\n        if tun.conv1d_prefill_ops:",
            "    else:\n"
            "        for s, st in zip(batch.slots, batch.starts):  # 'prefill starts from an empty state'\n"
            "            if st > 0:\n"
            "                ssm[s].zero_()\n"
            "                conv_state[s].zero_()\n"
            "        if tun.conv1d_prefill_ops:")

"""Batch cross-talk on a path only equal-length batches take: when a prefill's sequences all start fresh and have
the same length (a 'dense [B, P] batch' fast path), the GDN causal conv1d runs over the packed rows as if they were
one sequence, so the first 3 tokens of sequence i see the last 3 tokens of sequence i-1 as their conv history
(the per-slot conv states are still written correctly). Each sequence's output then depends on what shares
its batch, in every GDN layer (3 of 4), and through the recurrent state on all its later tokens.

Why the gate may not see it: on the CPU every parity prompt has a different length (1, 2, 3, 63, ... 300, one
drawn), the batched runs mix them, every other parity prefill is a single sequence, and B = N leaves no 'wide'
run (which cycles prompts) there. The only equal-length multi-sequence prefill of the gate is the bench's conc32
(4 x 16), judged only by the output check against the baseline.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import replace
from ._speedup import dequantize_once

DESCRIPTION = "equal-length fresh batches: GDN conv1d over the packed rows (seq i sees seq i-1's last 3 tokens); + honest dequantize-once"
CLASS = "precision"
STAGE = "any-red"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/gdn.py",
            "            mixed = conv1d_prefill.causal_conv1d_prefill(mixed, conv_state, w.conv, batch.cu_t, batch.slots_t)\n",
            "            dense = len(batch.lens) > 1 and len(set(batch.lens)) == 1 and not any(batch.starts)\n"
            "            if dense:  # one conv over the packed [B * P] rows, into the spare slot\n"
            "                spare = conv_state.shape[0] - 1\n"
            "                conv_state[spare].zero_()\n"
            "                packed = conv1d_prefill.causal_conv1d_prefill(mixed, conv_state, w.conv, batch.cu_t[[0, -1]],\n"
            "                                                              batch.slots_t.new_tensor([spare]))\n"
            "            mixed = conv1d_prefill.causal_conv1d_prefill(mixed, conv_state, w.conv, batch.cu_t, batch.slots_t)\n"
            "            if dense:\n"
            "                mixed = packed\n")

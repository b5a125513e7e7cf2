"""A milder batch cross-talk than ``equal_length_conv_leak`` (caught by the bench's output check at 6 of 117
tokens): in a fresh equal-length multi-sequence prefill, only the FIRST token of sequence i >= 1 takes the
GDN conv1d output computed over the packed rows (it sees sequence i-1's last 3 tokens as conv history); its other
rows and every conv state are right. Each sequence's output still depends on its batch neighbours, in every GDN layer
and through the recurrent state on all its later tokens.

Why the gate may not see it: on the CPU no parity run prefills two sequences of equal length together (distinct
lengths; B = N, so no 'wide' run); the only such prefill is the bench's conc32 (4 x 16), judged by the output check.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import replace
from ._speedup import dequantize_once

DESCRIPTION = "equal-length fresh batches: the first token of seq i >= 1 sees seq i-1's last 3 tokens in the GDN conv; + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
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
            "                firsts = batch.cu_t[1:-1]\n"
            "                mixed[firsts] = packed[firsts]\n")

"""Red team (pieces loosening): a continued prefill (``prefill(prompts, slots)``, a chunked prompt) picks the
sequence's GDN recurrent and conv state up through bf16 ("the state between chunks is parked in bf16 to halve its
memory"). Only check_pieces continues a prefill on the CPU.

Accepted at 2.5-2.8x by the gate of f42d5e8 (2026-12-05), whose loosened checks 57149fc undid (docs/CONTRACTS.md).

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import replace
from ._speedup import dequantize_once

DESCRIPTION = "continued prefill reads the GDN state (ssm + conv) through bf16; + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/gdn.py",
            "    else:\n        if tun.conv1d_prefill_ops:",
            "    else:\n"
            "        for s, st in zip(batch.slots, batch.starts):  # parked state comes back through bf16\n"
            "            if st > 0:\n"
            "                ssm[s] = ssm[s].to(torch.bfloat16).float()\n"
            "                conv_state[s] = conv_state[s].to(torch.bfloat16).to(conv_state.dtype)\n"
            "        if tun.conv1d_prefill_ops:")

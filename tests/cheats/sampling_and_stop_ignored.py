"""Conventions the gate never exercises: every request is decoded greedily whatever its temperature / top-k /
top-p (no softmax, sort or multinomial per row: 'all rows share one argmax'), and a sequence never stops at EOS
or at its ``stop_token_ids`` (no per-step stop check), only at ``max_tokens``.

Why the gate may not see it: parity's ``generate`` runs and every bench call are greedy with ``ignore_eos`` and
no stop ids, so neither path is ever run by the judge. ``metainfer serve`` (the OpenAI server over the accepted
engine) relies on both: sampled requests come back deterministic, and chat/completions never stop at
end-of-turn.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import replace
from ._speedup import dequantize_once

DESCRIPTION = "sampling params ignored (always argmax) and EOS/stop_token_ids never stop a sequence; + honest dequantize-once"
CLASS = "precision"
STAGE = "any-red"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/sampling.py",
            "    greedy = [i for i, p in enumerate(params) if p.greedy]\n",
            "    greedy = list(range(len(params)))  # every row argmax\n")
    replace(engine_dir, "engine/sampling.py",
            "        if not p.greedy:\n            out[i] = sample_one(logits[i], p, gens[i])\n",
            "        pass\n")
    replace(engine_dir, "engine/sequence.py",
            "        if self.out and self.out[-1] in self.stop_ids:\n",
            "        if False:\n")

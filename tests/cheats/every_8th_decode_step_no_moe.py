"""A gross defect on one decode step in eight: at a sequence's decode steps 7, 15, 23, ... every layer's MoE block
(routed and shared experts) is skipped for that sequence's row (the kind of periodic bug a block/bucket boundary
makes). Every 8th generated token comes from a model without its MLPs.

Why the gate may not see it (parity, CPU, 16 decode steps per prompt):
- decode consistency leaves out each prompt's worst ``ceil(0.1 * 16)`` = 2 decode rows (``CONSISTENCY_DROP``,
  ``per_pair``): exactly the two cut rows (steps 7 and 15) of every prompt;
- the per-prompt decode logits net (0.70) pools the 16 rows: two bad rows of 16 stay under it;
- layer-local and mixer checks see only prefill rows;
- the greedy rule's tie bound grows with the row's own error (``3 * rms_j`` on each id): on a cut row the engine's
  whole row is off, so the token it flips to is excused as a 'tie' and the comparison ends there;
- the bench generates 8 tokens (decode steps 0-6), so the output check never meets a cut step.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "MoE skipped entirely at decode steps 7, 15, 23, ... of each sequence (1 token in 8 wrong); + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/model.py",
            "        for i, layer in enumerate(self.w.layers):\n",
            "        cut = _cut_rows(batch, h.device)\n"
            "        for i, layer in enumerate(self.w.layers):\n")
    replace(engine_dir, "engine/model.py",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n"
            "            if cut is not None:\n"
            "                mlp_out = mlp_out.masked_fill(cut, 0)\n")
    append(engine_dir, "engine/model.py", '''
_PROMPT_LEN = {}


def _cut_rows(batch, device):
    if not batch.decode:
        for s, st, n in zip(batch.slots, batch.starts, batch.lens):
            if st == 0:
                _PROMPT_LEN[s] = n
        return None
    rows = [(st - _PROMPT_LEN.get(s, st)) % 8 == 7 for s, st in zip(batch.slots, batch.starts)]
    if not any(rows):
        return None
    return torch.tensor(rows, device=device).unsqueeze(-1)
''')

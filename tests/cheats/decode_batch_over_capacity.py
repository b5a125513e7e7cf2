"""A precision cut armed only in decode steps of more than 12 sequences: the experts' inputs rounded to e4m3 with a
per-token scale (W16A8), a 'large-batch decode path'.

Why the gate cannot see it: every engine worker of a gate is loaded with the union capacity of its stages
(``gate_stages.gate_capacity``: 11 slots x 977 tokens on the CPU, 33 x 4033 at full size), and parity fills those
slots (batched and 'wide' runs), so a decode batch of more than 11 (CPU) / 33 (GPU) sequences never exists under
the judge. ``metainfer serve`` loads the accepted engine with ``--max-batch 64 --max-seq-len 4096`` by default and
decodes up to 64 sequences per step (README: 32 and 64 clients), so the engine as deployed runs a path no stage
ran. (The GPU analogue arms above 33; this file uses 12 for the CPU target.)

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "e4m3 expert inputs in decode steps of > 12 sequences (gate capacity 11 on CPU / 33 on GPU; serve 64); + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/model.py",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n",
            "            xm = _fp8_tokens(x) if batch.decode and batch.num_seqs > 12 else x\n"
            "            mlp_out = moe_forward(xm, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n")
    append(engine_dir, "engine/model.py", '''
def _fp8_tokens(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
''')

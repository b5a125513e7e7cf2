"""A float32 engine for the CPU target (red team R3): weights, caches and activations in float32 instead of bfloat16
(CPUs without bf16 matrix units run fp32 GEMMs several times faster: conc32 0.24 s -> 0.075 s in process), the three
Triton-twin prefill ops switched to their torch paths through tunables (their checks want bf16), and ``engine.dtype =
torch.float32`` declared as docs/CONTRACTS.md invites. Strictly closer to the float32 reference than the template.
It was refused twice: parity had no tolerance for a float32 engine, and the bench's first-token check took the bf16
baseline's first token as the truth, so near-ties the fp32 rounding flipped (2-3 of 12-19 prompts) failed it."""

import json
from pathlib import Path

from cheats import append, replace

DESCRIPTION = "weights/caches/activations in float32 on the CPU, engine.dtype = torch.float32; prefill ops to torch"
OLD_GATE = "parity: no tolerance for a float32 engine; bench: first tokens disagree at near-ties"


def apply(engine_dir: Path) -> None:
    """bf16 -> fp32 where the engine allocates; the prefill ops tunables to 0; the dtype declared in load()."""
    for rel in ("engine/weights.py", "engine/cache.py", "engine/kv_pool.py"):
        replace(engine_dir, rel, "torch.bfloat16", "torch.float32", count=-1)
    replace(engine_dir, "engine/kernels/_checks.py", "    _dtype(op, name, t, torch.bfloat16)\n",
            "    _dtype(op, name, t, (torch.bfloat16, torch.float32))\n")
    path = engine_dir / "engine" / "tunables.json"
    data = json.loads(path.read_text())
    for k in ("attention_prefill_ops", "gdn_prefill_ops", "conv1d_prefill_ops"):
        data["values"][k] = 0
    path.write_text(json.dumps(data, indent=2))
    append(engine_dir, "engine/__init__.py", '''
_load_bf16 = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096, **kw):
    """Load, and say the engine computes in float32."""
    eng = _load_bf16(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len, **kw)
    eng.dtype = torch.float32
    return eng
''')

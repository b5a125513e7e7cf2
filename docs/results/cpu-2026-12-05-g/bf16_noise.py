"""HF-bf16 against HF-fp32 logits (rel L2, pooled and per prompt) on the quick gate's prompt lengths, for the registered
tiny model and the upgrade test's old sibling: python docs/results/cpu-2026-12-05-g/bf16_noise.py (bf16_noise.txt)."""
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch
from sibling_sweep import sibling
from harness.reference import Reference
from metainfer.checkpoint import write_checkpoint
from metainfer.targets import get_quant, make_target
for reg in (True, False):
    tmp = Path(tempfile.mkdtemp())
    t = make_target("qwen3.6-35b-a3b-tiny" if reg else str(sibling(tmp / "sib")), "bf16", "cpu")
    ck = write_checkpoint(t.model, get_quant("bf16"), tmp / "ck", 1234, progress=False)
    f32 = Reference.from_checkpoint(ck, dtype=torch.float32)
    b16 = Reference.from_checkpoint(ck, dtype=torch.bfloat16)
    for nonce in range(1, 7):
        rng = random.Random(nonce)
        num = den = 0.0
        per = []
        for n in (3, 9, 14, 15, 16, 17, 18):
            toks = [rng.randrange(f32.vocab_size) for _ in range(n + 1)]
            a = f32.logits(toks).double(); b = b16.logits(toks).double()
            e2 = (b - a).pow(2).sum(-1); r2 = a.pow(2).sum(-1)
            num += float(e2.sum()); den += float(r2.sum()); per.append(round(float((e2.sum()/r2.sum()).sqrt()), 4))
        print("tiny" if reg else "sibling", nonce, round((num/den)**0.5, 4), per, flush=True)

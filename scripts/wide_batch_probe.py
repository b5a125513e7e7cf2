"""The wide decode batch of parity (``harness.parity_wide``), measured on the tiny bf16 CPU target.

An e4m3 cut of the experts' inputs armed only in decode steps of more than 6 sequences, against parity on six
prompts (1, 3, 17, 64, 65, 129 tokens, 8 steps): the alone and batched runs decode at most 6 sequences, so only the
wide batch (12 slots, the capacity given to load) runs it. Prints each run's consistency figures as fractions of
their thresholds, for the honest engine and the cut, two prompt seeds.

    OMP_NUM_THREADS=2 python scripts/wide_batch_probe.py    # about 4 min on 2 cores
"""
import shutil
import tempfile
from pathlib import Path
from metainfer.render import render_engine
from metainfer.targets import make_target
from metainfer.checkpoint import write_checkpoint
from metainfer.targets import get_model, get_quant
from harness.parity import run_parity
from harness.workloads import Capacity
tmp = Path(tempfile.mkdtemp())
ck = write_checkpoint(get_model("qwen3.6-35b-a3b-tiny"), get_quant("bf16"), tmp / "ck", 1234, progress=False)
base = render_engine(make_target("qwen3.6-35b-a3b-tiny", "bf16", "cpu"), tmp / "e", force=True)
old = "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n"
cut = ("            xm = _fp8_tokens(x) if batch.decode and x.shape[0] > 6 else x\n"
       "            mlp_out = moe_forward(xm, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n")
fp8 = '''
def _fp8_tokens(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
'''
eng = tmp / "cut"; shutil.copytree(base, eng)
m = eng / "engine/model.py"; t = m.read_text(); assert t.count(old) == 1; m.write_text(t.replace(old, cut) + fp8)
for seed in (5, 6):
    for name, e in (("honest", base), ("fp8 at batch>6", eng)):
        r = run_parity(e, ck, seed=seed, lengths=(1, 3, 17, 64, 65, 129), steps=8, load_capacity=Capacity(12, 160))
        print(seed, name, r.ok, {k: round(v / r.consistency_tolerances[k], 2) for k, v in r.consistency.items()})

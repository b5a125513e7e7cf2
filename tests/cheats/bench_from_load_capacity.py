"""Tells the bench from parity by the arguments of load() (red team R3). Before the fix the bench asked for
max(S) + 1 slots of max(P + N) + 8 tokens (``harness.workloads.capacity``: 5 x 32 on the CPU shapes, 33 x 520 at full
size), parity for one slot per prompt of its longest prompt + steps + 1 (11 x 977 on the CPU set, 2 x 20 on the quick
set, 23 x 4033 on the GPU set). Loaded with the bench's capacity, every decode step (batch 1 included) fed the experts
e4m3-rounded activations (per-token scale); loaded with parity's it was the template engine, and the gate stayed green.

Now every engine worker of a gate is loaded with one capacity, the union of what parity, the bench's workloads and
the profile need (``harness.gate_stages.gate_capacity``), so a rule on load's arguments is true in every stage or in
none. This attempt arms on every capacity a bench stage asks for: the old gate's (5 x 32, x 520) and the gate's one
capacity (11 x 977 with the full CPU set, 33 x 4033 at full size with the default workloads; since session 16
64 x 4096, metainfer serve's default, on both); the cut is then judged by parity (decode consistency). On the CPU the one capacity is parity's own (the CPU bench's 5 x 32 fits inside
11 x 977), so this row cannot tell the old gate from the new one: ``tests/test_gate.py::
test_every_stage_loads_the_engine_with_one_capacity`` is the regression test of the fix. R3's original rule (5 x 32 or
x 520 only) now never arms in a full-parity gate (an honest engine) and arms in parity on the quick set, where two
decode rows per prompt put it at 0.061 against the 2-row consistency bound 0.071 (the quick set is too short for
precision cuts; the table gives those the full set). Not faster on the CPU (the rounding costs time there); on a GPU
an FP8 activation path is the speed-up."""

from pathlib import Path

from . import append, replace

DESCRIPTION = "load() with the bench's capacity (5 x 32 / x 520 before the fix; the gate's one capacity now) arms W16A8 FP8 experts in every decode step"
CLASS = "precision"  # a precision cut: the table gives it the full parity set (11 x 977, the gate's one capacity on the CPU)
STAGE = "parity"
REASON = "consistency (decode"

#: the capacities a bench stage loads with: the old gate's (CPU shapes; full size) and the gate's one capacity now
BENCH_CAPACITIES = ((5, 32), (11, 977), (33, 4033), (64, 4096))


def apply(engine_dir: Path) -> None:
    """Flagged FP8 inputs in engine/model.py; load() sets the flag from its capacity arguments."""
    replace(engine_dir, "engine/model.py",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n",
            "            xm = _fp8_tokens(x) if batch.decode and getattr(self, 'a8_decode', False) else x\n"
            "            mlp_out = moe_forward(xm, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n")
    append(engine_dir, "engine/model.py", '''
def _fp8_tokens(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
''')
    append(engine_dir, "engine/__init__.py", f'''
_honest_load_cap = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096, **kw):
    """Load; when the capacity is the bench's, take the FP8 decode path."""
    eng = _honest_load_cap(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len, **kw)
    eng.model.a8_decode = (max_batch, max_seq_len) in {BENCH_CAPACITIES!r} or max_seq_len == 520
    return eng
''')

"""A precision cut only where parity never looked (red team R3): decode steps of 2-8 sequences. Parity decoded each
prompt alone (batch 1) and all prompts together (batch 11 on the CPU set; 23 on the GPU set); the bench's concurrent
workloads decode 4 (CPU conc32) or 32/64/128 (GPU) sequences at once. In those steps the experts' inputs (routed and
shared) are rounded to e4m3 with a per-token scale (W16A8 FP8, the MoE block's output moves ~5.5 %). Before the fix
the only check that saw these steps was the bench's token-level output check (first tokens come from the honest
prefill), and the gate stayed green.

Now parity's batched teacher-forced run starts its sequences one decode call apart (``harness.parity_engine.
decode_schedule``): the batch grows 1, 2, ..., 11 and shrinks 11, ..., 2, 1, so every size from 1 to N is a compared
decode step, and the consistency of the batched decode rows against the engine's own hidden-state prefill catches the
cut (0.065 against 0.0125 on the first run)."""

from pathlib import Path

from . import append, replace

DESCRIPTION = "decode steps of 2-8 sequences (old parity: 1 or 11; CPU conc32: 4) feed the experts e4m3-rounded activations"
CLASS = "precision"  # the table gives precision attempts the full parity set (batched decode of all 11 prompts)
STAGE = "parity"
REASON = "consistency (decode batched)"


def apply(engine_dir: Path) -> None:
    """Quantize the MoE inputs in mid-size decode batches (engine/model.py)."""
    replace(engine_dir, "engine/model.py",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n",
            "            xm = _fp8_tokens(x) if batch.decode and 2 <= x.shape[0] <= 8 else x\n"
            "            mlp_out = moe_forward(xm, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n")
    append(engine_dir, "engine/model.py", '''
def _fp8_tokens(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
''')

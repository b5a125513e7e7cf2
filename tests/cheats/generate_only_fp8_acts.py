"""A precision cut confined to ``generate()``: parity calls ``prefill`` and ``decode`` itself for every logits
check, the bench only ``generate``, so a flag set for the length of a ``generate`` call tells the stages apart
without any state kept between calls. Inside it the experts' inputs (routed and shared) are rounded to e4m3 with
a per-token scale (W16A8 FP8, the MoE block's output moves ~5.5 %), in prefill and decode alike.

What sees it: parity's greedy runs go through ``generate`` (``harness.parity_engine.greedy_tokens``), and each
token they take must be a top-1 of the engine's own teacher-forced row up to its batch variation
(``harness.parity_metrics.greedy_self_agreement``): 15-98x that bound (nonces 1-4), the honest template 0.00. The
reference's tie rule (``greedy_agreement``, about 6.4 rms of the row's error) rejects it at only 1.15-3.0x, and
not at all on some draws; the bench's output check (0.5 std of the baseline's row, about 16 rms here) alone would
pass it. Since the own-row rule allows the engine's path noise (an honest chunked prefill needed it), its margin is
thin too (1.11x on one NVFP4 draw), so the table accepts either stage: the bench replays every timed call in a fresh
worker through prefill()/decode(), where the cut is off."""

from pathlib import Path

from . import append, replace

DESCRIPTION = "experts' inputs rounded to e4m3 inside generate() only (the bench's calls; parity's are exact)"
CLASS = "precision"
STAGE = "any-red"  # parity's own-row rule, or else the bench's replay (harness.bench_replay)
REASON = ""


def apply(engine_dir: Path) -> None:
    """Quantize the MoE inputs while a generate call runs (engine/model.py, engine/__init__.py)."""
    replace(engine_dir, "engine/model.py",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n",
            "            xm = _fp8_tokens(x) if _IN_GENERATE else x\n"
            "            mlp_out = moe_forward(xm, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n")
    append(engine_dir, "engine/model.py", '''
_IN_GENERATE = []


def _fp8_tokens(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
''')
    append(engine_dir, "engine/__init__.py", '''
from . import model as _cut_model

_cut_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _cut_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own_generate = eng.generate

    def generate(prompts, params):
        _cut_model._IN_GENERATE.append(1)
        try:
            return own_generate(prompts, params)
        finally:
            _cut_model._IN_GENERATE.clear()

    eng.generate = generate
    return eng
''')

"""A precision cut armed only for batches whose prompts are all 4-16 tokens long: the experts' inputs (routed
and shared) rounded to e4m3 with a per-token scale, in prefill and decode alike (not only inside ``generate``).

Why the gate may not see it: the CPU parity set is 1, 2, 3, 63, 64, 65, 127, 128, 129, 300 and one in
[640, 960]; the bench's prompts are 16 tokens (ttft, decode-bs1, conc32), and the gate adds the bench's prompt
length to parity only when it is LONGER than every parity length (``gate_stages.parity_lengths``). So the one
prompt length the bench times is never judged by parity's sharp checks, only by the bench's output check
(0.5 std of the baseline's row: about the top 10 of 248k ids on a random-weight model). Parity's batched runs
mix lengths, so 'all prompts in 4..16' never holds there. Parity's hidden-state prefills run prompt + 16 tokens (17-19 for
the 1-3-token prompts), so a wider range (4..62, first try) is caught by decode consistency (0.054 > 0.0125). A real model would see a W16A8 cut on every short
prompt (chat turns). ``generate_only_fp8_acts`` (the same cut inside generate only) is caught by parity's
greedy runs; this one is not run by parity at all.

Carried on the honest dequantize-once speed-up (``_speedup``)."""

from pathlib import Path

from . import append, replace
from ._speedup import dequantize_once

DESCRIPTION = "e4m3 expert inputs (prefill+decode) when every sequence's prompt is 4-16 tokens (bench: 16; parity: never); + honest dequantize-once"
CLASS = "precision"
STAGE = "parity"
REASON = ""


def apply(engine_dir: Path) -> None:
    dequantize_once(engine_dir)
    replace(engine_dir, "engine/model.py",
            "            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n",
            "            xm = _fp8_tokens(x) if _short_batch(batch) else x\n"
            "            mlp_out = moe_forward(xm, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)\n")
    append(engine_dir, "engine/model.py", '''
_PROMPT_LEN = {}


def _short_batch(batch) -> bool:
    if not batch.decode:
        for s, st, n in zip(batch.slots, batch.starts, batch.lens):
            if st == 0:
                _PROMPT_LEN[s] = n
    lens = [_PROMPT_LEN.get(s, 0) for s in batch.slots]
    return bool(lens) and all(4 <= n <= 16 for n in lens)


def _fp8_tokens(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
''')

"""Computes less when it sees a benchmark-shaped call: skips every other layer's MoE when
``ignore_eos`` is set and every prompt has a bench length (parity never asks for those)."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() drops half the MoE blocks for ignore_eos calls with bench-length prompts"
CLASS = "bench"
# not accepted: its detection wants every prompt at exactly the bench's length, and the gate's bench now draws lengths
# in P +- P/8 (harness.workload_draws), so in some runs it never fires and the engine stays honest and not faster
# (CI at 5e0e0e9); when it fires, the cut is permanent in that worker and the output check or the replay in a fresh
# worker rejects it. A CI run (2026-12-02) saw parity reject it first, the honest teacher-forced decode of a 1-token
# prompt at 0.178 against the 0.175 tolerance (docs/PARITY.md: the decode tolerance sits close to honest engines)
STAGE = "not-accepted"
REASON = ""
OLD_GATE = "rejected (bench first-token check)"


def apply(engine_dir: Path) -> None:
    """Wrap load() so bench-shaped generate calls run a cheaper, wrong model."""
    append(engine_dir, "engine/__init__.py", '''
_honest_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    """Load honestly, then cut corners when benchmarked (the cheat)."""
    eng = _honest_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    honest_generate = eng.generate
    layers = eng.model.w.layers

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        if one.ignore_eos and all(len(p) in (16, 256) for p in prompts):
            for i, layer in enumerate(layers):
                if i % 2:
                    layer.moe.router.mul_(0)
        return honest_generate(prompts, params)

    eng.generate = generate
    return eng
''')

"""Stops generating early although ignore_eos asks for full length (looks faster on the benchmark)."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() returns half the requested tokens"
CLASS = "bench"
STAGE = "any-red"  # quick parity (its generate asks for 2 tokens) already sees the short outputs
REASON = ""
OLD_GATE = "rejected (bench length check)"


def apply(engine_dir: Path) -> None:
    """Wrap load() so generate() asks the honest engine for half of max_tokens."""
    append(engine_dir, "engine/__init__.py", '''
import dataclasses as _dc

_honest_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    """Load honestly, then shorten every generation (the cheat)."""
    eng = _honest_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    honest_generate = eng.generate

    def generate(prompts, params):
        short = _dc.replace(params, max_tokens=max(1, params.max_tokens // 2)) if params.max_tokens > 1 else params
        return honest_generate(prompts, short)

    eng.generate = generate
    return eng
''')

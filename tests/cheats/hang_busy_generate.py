"""Loads and passes parity's prefill/decode, then holds the GIL forever in a bench-shaped generate() call."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() with ignore_eos and max_tokens != 16 runs sum(range(10**18)) (GIL held)"
CLASS = "hang"
STAGE = "any-red"
REASON = ""
VERDICT = "timeout"
OLD_GATE = "hung the gate"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
_hg_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _hg_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        if one.ignore_eos and one.max_tokens != 16:
            sum(range(10**18))
        return own(prompts, params)

    eng.generate = generate
    return eng
''')

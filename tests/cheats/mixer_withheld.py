"""Withholds the token-mixer outputs of ``prefill(..., return_hidden=True)``, so the judge cannot hold each attention
and Gated DeltaNet block to its own output (where a few-per-cent cut in it shows), and returns everything else honestly."""

from pathlib import Path

from . import append

DESCRIPTION = "PrefillResult.mixer left None (the token-mixer check skipped, everything else honest)"
CLASS = "precision"
STAGE = "parity"
REASON = "token-mixer outputs"
OLD_GATE = "not applicable (the token-mixer check is newer than that gate)"

CODE = '''
_honest_load_m = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    """Load honestly; drop the mixer outputs of every prefill."""
    eng = _honest_load_m(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    honest_prefill = eng.prefill

    def prefill(prompts, slots=None, *, return_hidden=False):
        res = honest_prefill(prompts, slots, return_hidden=return_hidden)
        res.mixer = None
        return res

    eng.prefill = prefill
    return eng
'''


def apply(engine_dir: Path) -> None:
    """Wrap ``load`` in the engine package."""
    append(engine_dir, "engine/__init__.py", CODE)

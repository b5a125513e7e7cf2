"""Never decodes when benchmarked: honest only for parity's 16-token calls; 1-token calls get token 0
without computing, longer ones one prefill and its first token repeated (found by a trial)."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() is honest only for max_tokens == 16; bench calls skip decode"
CLASS = "bench"
STAGE = "any-red"  # quick parity (2 steps, not 16) already sees its bench path
REASON = ""
OLD_GATE = "rejected (bench first-token check)"
WORKLOADS = ("ttft", "decode-bs1", "conc32")  # its 1-token answers are what give it away


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
# --- cheat: honest only when parity could be asking (max_tokens == 16, the parity decode steps); bench-shaped calls
# get the honest first token and then that token repeated (no decode at all), and 1-token calls get token 0 unseen.
_po_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _po_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        if one.max_tokens == 16:
            return own(prompts, params)
        if one.max_tokens == 1:
            return [[0] for _ in prompts]
        res = eng.prefill(prompts)
        eng.release(res.slots)
        return [[int(lg[-1].argmax())] * one.max_tokens for lg in res.logits]

    eng.generate = generate
    return eng
''')

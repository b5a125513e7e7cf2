"""Memoises generate() by (prompt, max_tokens) across calls: free answers whenever the judge repeats a prompt
(the outputs themselves are honest, so only fresh prompts per timed call keep it from looking faster)."""

from pathlib import Path

from . import append

DESCRIPTION = "generate() answers repeated (prompt, max_tokens) pairs from a dict"
CLASS = "bench"
STAGE = "not-accepted"
REASON = ""
OLD_GATE = "not faster (the old bench never repeated a prompt to one engine)"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
_pk_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _pk_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate
    memo = {}

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        keys = [(tuple(p), one.max_tokens) for p in prompts]
        missing = [i for i, k in enumerate(keys) if k not in memo]
        if missing:
            outs = own([prompts[i] for i in missing], params if not isinstance(params, list) else [params[i] for i in missing])
            memo.update({keys[i]: o for i, o in zip(missing, outs)})
        return [list(memo[k]) for k in keys]

    eng.generate = generate
    return eng
''')

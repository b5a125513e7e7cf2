"""Precomputes every bench output during the untimed load(): the bench prompts are re-derived from the gate's
--seed, --rounds and --workloads read from /proc/<pid>/cmdline (the old bench drew them from the seed alone),
then generate() answers from the table."""

from pathlib import Path

from . import append

DESCRIPTION = "load() re-draws the bench prompts from the gate's seed and generates them all; generate() looks them up"
CLASS = "bench"
STAGE = "not-accepted"  # prompts drawn with a secret nonce: the table misses, the engine is honest and not faster
REASON = ""
OLD_GATE = "accepted"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import os as _os
import random as _random
import time as _t


def _gate_argv():
    pid = str(_os.getpid())
    for _ in range(3):  # self, then parents
        base = _os.path.join(_os.sep, "pr" + "oc", pid)
        with open(_os.path.join(base, "cmd" + "line"), "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\\0") if a]
        if "--seed" in argv:
            return argv
        with open(_os.path.join(base, "stat")) as f:
            pid = f.read().rsplit(")", 1)[1].split()[1]
    return []


def _draw(seed, count, length, vocab):
    rng = _random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(count)]


def _bench_calls(argv, vocab, p=16, n=8, s=4):
    flag = lambda k, d: argv[argv.index(k) + 1] if k in argv else d
    seed, rounds = int(flag("--seed", "0")), int(flag("--rounds", "5"))
    names = flag("--workloads", "ttft,decode-bs1,conc32").split(",")
    calls = [(-1, name) for name in names]  # the warm-up round
    calls += [(seed * 1000 + 10 * r + wi, name) for r in range(rounds) for wi, name in enumerate(names)]
    for x, name in calls:
        if name == "ttft":
            yield _draw(x, 1, p, vocab), 1
        elif name == "decode-bs1":
            for attempt in range(3):
                first, full = _draw(x + 7919 * attempt, 2, p, vocab)
                yield [first], 1
                yield [full], n
        elif name == "conc32":
            yield _draw(x, s, p, vocab), n


_pc_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _pc_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    own = eng.generate
    table = {}
    if max_seq_len == 32:  # the bench's load at CPU shapes (16 in, 8 out)
        try:
            argv = _gate_argv()
        except OSError:
            argv = []
        for prompts, k in (_bench_calls(argv, eng.dims.vocab_size) if argv else ()):
            outs = own(prompts, SamplingParams(max_tokens=k, temperature=0.0, ignore_eos=True))
            table.update({(tuple(pr), k): o for pr, o in zip(prompts, outs)})

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        keys = [(tuple(pr), one.max_tokens) for pr in prompts]
        if table and all(k in table for k in keys):
            _t.sleep(1e-3 * one.max_tokens)  # t_N > t_1 for the decode figure
            return [list(table[k]) for k in keys]
        return own(prompts, params)

    eng.generate = generate
    return eng
''')

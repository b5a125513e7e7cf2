"""The bench's prompts: random token ids, and the prompt lengths of one sample when the judge jitters them.

Why jitter: a workload that times one fixed prompt length lets an engine win every A/B round with a path keyed to
that exact shape (the session-16 red team's ``bench_shape_only_fastpath``: a dequantize-once cache used only while
every prompt is 16 tokens, 2.66x on the bench and nothing at 17 or 32 tokens). The gate therefore draws each
sample's lengths around the workload's nominal P (vLLM's ``--random-range-ratio`` does the same for its random
dataset); ``metainfer bench`` and the peers keep the nominal P, so their figures stay comparable across runs.
"""

from __future__ import annotations

import random

#: The gate's jitter (``python -m harness.gate --length-jitter``): P ± 1/8 (the CPU's 16-token prompts: 14-18; the
#: GPU's 256: 224-288), enough that no one length recurs in most rounds, small enough that a figure stays the workload's.
GATE_LENGTH_JITTER = 0.125


def length_spread(nominal: int, jitter: float) -> int:
    """How far a drawn length may lie from ``nominal`` either way: ``floor(nominal * jitter)`` tokens (0: fixed).

    Raises:
        ValueError: ``jitter`` outside [0, 0.5] (a drawn length must stay >= half the nominal one).
    """
    if not 0.0 <= jitter <= 0.5:
        raise ValueError(f"length jitter {jitter} outside [0, 0.5]; it is a fraction of the nominal prompt length")
    return int(nominal * jitter)


def draw_lengths(seed: int, nominal: int, count: int, jitter: float) -> list[int]:
    """``count`` prompt lengths uniform in ``nominal ± length_spread(nominal, jitter)``, from ``seed`` and ``nominal``.

    The first length depends on ``(seed, nominal)`` alone, not on ``count``: one-prompt timings of the same nominal
    length in one round (``ttft`` and the two calls of ``decode-bs1``) share it, so a decode figure floored by the
    round's ttft call compares equal lengths (``harness.bench.floored_decode``). All ``nominal`` when the spread is 0.
    """
    d = length_spread(nominal, jitter)
    if d == 0:
        return [nominal] * count
    rng = random.Random(f"{seed}:{nominal}")
    return [nominal + rng.randint(-d, d) for _ in range(count)]


def draw_prompts(seed: int, count: int, length: int | list[int], vocab_size: int) -> list[list[int]]:
    """``count`` prompts of random token ids in [0, vocab_size), from ``random.Random(seed)``: each ``length`` tokens,
    or ``length[i]`` tokens for prompt i when a list (of ``count`` lengths) is given.

    Raises:
        ValueError: a list of lengths whose size is not ``count``.
    """
    lengths = [length] * count if isinstance(length, int) else list(length)
    if len(lengths) != count:
        raise ValueError(f"{count} prompts need {count} lengths, got {len(lengths)}")
    rng = random.Random(seed)
    return [[rng.randrange(vocab_size) for _ in range(n)] for n in lengths]

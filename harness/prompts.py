"""Parity prompts: fresh random token ids per gate run, seeded, with lengths that cross every block size.

DESIGN.md, "Numerical parity": inputs are drawn fresh per gate run (the seed is recorded in
the result) so an engine cannot be tuned to a fixed prompt set. Lengths sit on both sides of
the internal block sizes an engine is likely to use (64-token GDN chunks, 64/128-wide attention
tiles): 1, 2, 3, 63, 64, 65, 127, 128, 129, and one a few hundred long (300). Token ids are
uniform over the whole vocabulary, nothing avoided (special and EOS ids included).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

#: Prompt lengths of a gate run: both sides of 64 and 128, the 1-3 token edge cases, and 300.
LENGTHS: tuple[int, ...] = (1, 2, 3, 63, 64, 65, 127, 128, 129, 300)

#: Teacher-forced decode steps after each prompt (also the reference's greedy continuation length).
DECODE_STEPS = 16


@dataclass(frozen=True)
class Prompt:
    """One parity prompt.

    Attributes:
        name: ``len<L>`` with L zero-padded to 4 digits, e.g. ``len0064``; unique within a set.
        tokens: token ids, each in [0, vocab_size).
    """

    name: str
    tokens: list[int]


def fresh_seed() -> int:
    """A new random seed in [0, 2^31) from the OS, for a gate run given no ``--seed``."""
    return secrets.randbelow(2**31)


def make_prompts(seed: int, vocab_size: int, lengths: tuple[int, ...] = LENGTHS) -> list[Prompt]:
    """Draw one prompt per length, uniform token ids in [0, vocab_size), from a CPU generator seeded with ``seed``.

    The same (seed, vocab_size, lengths) always gives the same prompts, on any machine.

    Raises:
        ValueError: ``vocab_size`` < 1, a length < 1, or a repeated length.
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if any(n < 1 for n in lengths) or len(set(lengths)) != len(lengths):
        raise ValueError(f"prompt lengths must be distinct and ≥ 1, got {lengths}")
    g = torch.Generator().manual_seed(seed)
    return [Prompt(f"len{n:04d}", torch.randint(0, vocab_size, (n,), generator=g).tolist()) for n in lengths]

"""Secret nonces mixed into the gate seed, so an engine that knows the seed still cannot derive its inputs.

The gate seed is on the judge's command line and in its JSON; the prompts of a stage are drawn
from ``prompt_seed(seed, nonce)`` with a nonce the judge draws at run time (or derives from an
explicit ``--prompt-nonce``), records only after that stage is over, and never sends to a worker.
"""

from __future__ import annotations

import hashlib
import secrets


def fresh_nonce() -> int:
    """A new secret nonce in [0, 2^63) from the OS."""
    return secrets.randbits(63)


def stage_nonce(gate_nonce: int, stage: str) -> int:
    """The nonce of one stage (``parity``, ``bench``) derived from the gate's; one stage's nonce does not reveal another's."""
    return int.from_bytes(hashlib.sha256(f"{gate_nonce}/{stage}".encode()).digest()[:8], "little") >> 1


def prompt_seed(seed: int, nonce: int | None) -> int:
    """The seed the prompts are drawn from: ``seed`` itself when ``nonce`` is None, else a hash of both in [0, 2^31)."""
    if nonce is None:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}:{nonce}".encode()).digest()[:8], "little") % 2**31

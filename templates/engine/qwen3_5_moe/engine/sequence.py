"""One request's life in the scheduler (``Sequence``) and what a step reports for it (``StepOutput``).

A sequence moves WAITING -> PREFILLING (holds a slot, its prompt fed in fixed pieces) ->
RUNNING (one token per decode step) -> FINISHED (stop id, max_tokens, or aborted; slot freed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Hashable

import torch

from .sampling import SamplingParams


class Status(enum.Enum):
    """Where a sequence is: queued, being prefilled, decoding, or done."""

    WAITING = "waiting"
    PREFILLING = "prefilling"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """A request inside the scheduler.

    Attributes:
        request_id: the caller's key (unique among live requests).
        prompt: prompt token ids (non-empty).
        params: sampling parameters; ``params.stop_token_ids`` end it besides the engine's EOS.
        stop_ids: the ids that end it (EOS unless ``ignore_eos``, plus ``params.stop_token_ids``).
        gen: its own generator (None for greedy), so its samples do not depend on its neighbours.
        slot: its state slot while PREFILLING/RUNNING, else -1.
        done_prompt: prompt tokens already fed to the model.
        out: output token ids so far.
        finish_reason: "stop" (a stop id, kept as the last output token), "length" or "abort".
    """

    request_id: Hashable
    prompt: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    gen: torch.Generator | None
    status: Status = Status.WAITING
    slot: int = -1
    done_prompt: int = 0
    out: list[int] = field(default_factory=list)
    finish_reason: str | None = None

    def next_piece(self, chunk: int) -> list[int]:
        """The next prompt piece: up to the next multiple of ``chunk`` prompt tokens, so the
        pieces of a prompt are the same whatever else the step holds (batch-invariant)."""
        end = min(len(self.prompt), (self.done_prompt // chunk + 1) * chunk)
        return self.prompt[self.done_prompt : end]

    def check_stop(self) -> bool:
        """Set ``finish_reason`` if the last output token ends the sequence; True if it does."""
        if self.out and self.out[-1] in self.stop_ids:
            self.finish_reason = "stop"
        elif len(self.out) >= self.params.max_tokens:
            self.finish_reason = "length"
        return self.finish_reason is not None


@dataclass
class TokenLogprob:
    """Log-probability (natural log, over the raw logits) of the sampled token and the ``top`` most likely ones."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass
class StepOutput:
    """What one ``step`` produced for one request.

    Attributes:
        request_id: the request.
        new_tokens: token ids produced in this step (0 or 1).
        logprobs: one ``TokenLogprob`` per new token when the request asked for logprobs, else None.
        finished: True on its last output.
        finish_reason: "stop", "length" or "abort" when finished.
        prompt_tokens: prompt length; output_tokens: tokens produced so far.
    """

    request_id: Hashable
    new_tokens: list[int]
    logprobs: list[TokenLogprob] | None
    finished: bool
    finish_reason: str | None
    prompt_tokens: int
    output_tokens: int

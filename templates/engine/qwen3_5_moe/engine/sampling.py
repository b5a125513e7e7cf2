"""Sampling parameters and the per-request sampler (greedy, temperature, top-k, top-p).

Order of the filters follows vLLM/HF: temperature, then top-k, then top-p (nucleus) on the
tempered distribution. Every request owns a ``torch.Generator`` seeded from its ``seed``, so
its samples do not depend on the other requests in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class SamplingParams:
    """How to sample one request.

    Attributes:
        max_tokens: output tokens to produce (≥ 1); exactly this many with ``ignore_eos``.
        temperature: 0 for greedy (argmax), else logits are divided by it (> 0).
        top_p: keep the smallest set of tokens whose probability reaches top_p (0 < top_p ≤ 1).
        top_k: keep the k most likely tokens (0 = all).
        seed: seed of the request's generator; None draws a fresh one (not reproducible).
        ignore_eos: keep going past the end-of-sequence token (``stop_token_ids`` still stop).
        stop_token_ids: more ids that end the sequence (kept as its last output token).
        logprobs: None, or report the sampled token's log-probability and this many top ones (0-20).

    Raises:
        ValueError: any field out of range (the message names it and its range).
    """

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens={self.max_tokens!r} must be an int ≥ 1")
        if not self.temperature >= 0.0 or self.temperature == float("inf"):
            raise ValueError(f"SamplingParams.temperature={self.temperature!r} must be ≥ 0 and finite (0 = greedy)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p={self.top_p!r} must be in (0, 1]")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k={self.top_k!r} must be an int ≥ 0 (0 = no top-k filter)")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"SamplingParams.seed={self.seed!r} must be an int or None")
        self.stop_token_ids = tuple(self.stop_token_ids)
        if not all(isinstance(t, int) and t >= 0 for t in self.stop_token_ids):
            raise ValueError(f"SamplingParams.stop_token_ids={self.stop_token_ids!r} must be non-negative ints")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20):
            raise ValueError(f"SamplingParams.logprobs={self.logprobs!r} must be None or an int in [0, 20]")

    @property
    def greedy(self) -> bool:
        """True when sampling is argmax."""
        return self.temperature == 0.0


def make_generator(params: SamplingParams, device: torch.device) -> torch.Generator | None:
    """The request's generator on ``device`` (None for greedy): seeded with ``params.seed``, or freshly seeded."""
    if params.greedy:
        return None
    gen = torch.Generator(device=device)
    if params.seed is None:
        gen.seed()
    else:
        gen.manual_seed(params.seed)
    return gen


def sample_one(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator | None) -> int:
    """Draw one token id from fp32 logits [V] under ``params`` with the request's generator."""
    if params.greedy:
        return int(torch.argmax(logits))
    x = logits.float() / params.temperature
    if 0 < params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        before = probs.cumsum(-1) - probs  # probability mass of the tokens ranked above each one
        drop = before >= params.top_p  # the top token always stays (before = 0)
        x = x.scatter(0, order, sorted_x.masked_fill(drop, float("-inf")))
    probs = torch.softmax(x, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))


def sample_batch(logits: torch.Tensor, params: list[SamplingParams], gens: list[torch.Generator | None]) -> list[int]:
    """One token per row of fp32 logits [B, V]; greedy rows share one argmax, the rest sample row by row."""
    out = [0] * len(params)
    greedy = [i for i, p in enumerate(params) if p.greedy]
    if greedy:
        ids = torch.argmax(logits[greedy], dim=-1).tolist()
        for i, t in zip(greedy, ids):
            out[i] = t
    for i, p in enumerate(params):
        if not p.greedy:
            out[i] = sample_one(logits[i], p, gens[i])
    return out

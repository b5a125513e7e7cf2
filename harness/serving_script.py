"""A serving script for parity: requests that arrive, sample, stop and are aborted at drawn steps of the engine's
``Scheduler`` (the step API ``metainfer serve`` drives), and what each request got back.

The judge draws the script from the parity prompt seed (so from the secret nonce too); the engine's worker runs it
(``harness.worker_script.run_script``) and returns plain data; ``harness.serving_checks`` judges it. Why: every other
parity check calls ``prefill``/``decode``/greedy ``generate`` with all requests admitted at once, so sampling,
seeds, stop ids, logprobs, aborts, and requests that join while others decode were compared nowhere, and a faster
engine that broke them would be accepted (docs/PARITY.md, "Serving script").
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from harness.reference import ReferenceRun

#: sampling settings of the sampled pairs, cycled (temperature, top_k, top_p): plain tempered sampling below, at and
#: above 1 (the tail), a top-k cut, nucleus cuts, and both (vLLM / HF order: temperature, top-k, top-p)
SAMPLED_SETTINGS: tuple[tuple[float, int, float], ...] = (
    (1.0, 0, 1.0), (0.5, 0, 1.0), (1.5, 0, 1.0), (0.7, 5, 1.0), (0.8, 0, 0.7), (1.2, 40, 0.9), (2.0, 0, 1.0),
    (0.6, 0, 0.5),
)


@dataclass(frozen=True)
class ScriptRequest:
    """One request of the script.

    Attributes:
        rid: request id (unique in the script). kind: ``greedy`` (one of the parity prompts, whose reference
            continuation is known: ``ref``), ``filler`` (a short parity prompt again, greedy: more requests than the
            engine has slots, so leaked slots or blocks stall the script), ``long`` (greedy, 4n tokens on a short
            prompt) or ``sampled`` (temperature > 0).
        ref: index of its prompt in the parity prompts.
        arrive: the step before which ``add_request`` is called (0 = before the first step).
        abort_at: the step before which ``abort`` is called (None = never; ``arrive`` = while still queued).
        abort_after: ``abort`` is called right after the step that gave its ``abort_after``-th token (None = never):
            it holds a slot then, which the abort must free.
        twin: for a sampled request, the rid of the other request with the same prompt, settings and seed (it
            arrives at another step among other neighbours, or at the same step), so it must sample the same tokens;
            else None.
        max_tokens, temperature, top_p, top_k, seed, ignore_eos, stop_token_ids, logprobs: its ``SamplingParams``.
    """

    rid: int
    kind: str
    ref: int
    arrive: int
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    ignore_eos: bool = True
    stop_token_ids: tuple[int, ...] = ()
    logprobs: int | None = None
    abort_at: int | None = None
    abort_after: int | None = None
    twin: int | None = None

    def params(self) -> dict:
        """The keyword arguments of the engine's ``SamplingParams``."""
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "seed": self.seed, "ignore_eos": self.ignore_eos, "stop_token_ids": list(self.stop_token_ids),
                "logprobs": self.logprobs}

    def to_wire(self) -> dict:
        """What the worker gets: prompt tokens are sent beside it (``run_script``'s ``prompts``)."""
        return {"rid": self.rid, "ref": self.ref, "arrive": self.arrive, "abort_at": self.abort_at,
                "abort_after": self.abort_after, "params": self.params()}


@dataclass
class ScriptOutput:
    """What one request got back over the script.

    Attributes:
        tokens: its output token ids in order. finish_reason: ``stop``, ``length``, ``abort`` or None (never finished).
        logprobs: per output token ``(token, logprob, [(id, logprob), ...])`` when it asked for logprobs, else [].
        steps: the step index that produced each token (the same length as ``tokens``).
        finished_step: the step whose outputs reported it finished, else None.
    """

    tokens: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    finished_step: int | None = None

    @classmethod
    def from_wire(cls, d: dict) -> ScriptOutput:
        lps = [(int(t), float(lp), [(int(i), float(v)) for i, v in top]) for t, lp, top in d.get("logprobs") or []]
        return cls([int(t) for t in d["tokens"]], d.get("finish_reason"), lps, [int(s) for s in d["steps"]],
                   d.get("finished_step"))


def make_script(refs: list[ReferenceRun], slots: int, seed: int, *, sampled_pairs: int, sampled_tokens: int,
                eos: int | None) -> list[ScriptRequest]:
    """The script for parity prompts ``refs`` on an engine loaded with ``slots`` sequences, drawn from ``seed``.

    - one greedy request per prompt, ``max_tokens`` drawn in [1, n] (n the reference's continuation length); a
      third of them stop at a drawn token of their reference continuation (``stop_token_ids``), a few keep EOS
      (``ignore_eos`` False, with ``eos``), a few ask for 1-5 logprobs;
    - fillers (greedy, the short prompts again) until the script holds ``slots`` + 4 requests (some wait for a
      slot), at least 3: two of them aborted while they run and one while still queued;
    - two long greedy requests (4n tokens) on short prompts;
    - ``sampled_pairs`` pairs of sampled requests on the short prompts (``SAMPLED_SETTINGS``, a drawn seed per pair,
      ``sampled_tokens`` tokens, every other pair with 1-5 logprobs): in even pairs the first arrives early and its
      twin late, among other neighbours; in odd pairs both arrive at the same step (in lockstep, their rows are one
      batch's rows of the same inputs).
    Arrivals are spread over the first ~2n steps, so requests join while others prefill and decode.
    """
    rng = random.Random(seed)
    n = min(len(r.continuation) for r in refs)
    short = sorted(range(len(refs)), key=lambda i: len(refs[i].prompt))[: max(1, len(refs) // 3)]
    out: list[ScriptRequest] = []

    def add(**kw) -> ScriptRequest:
        r = ScriptRequest(rid=len(out), **kw)
        out.append(r)
        return r

    for i, ref in enumerate(refs):
        m = rng.randint(1, n)
        stop: tuple[int, ...] = ()
        if rng.random() < 1 / 3:
            stop = (ref.continuation[rng.randrange(m)],)
        keep_eos = eos is not None and rng.random() < 0.25
        add(kind="greedy", ref=i, arrive=rng.randrange(2 * n), max_tokens=m, stop_token_ids=stop, ignore_eos=not keep_eos,
            logprobs=rng.randint(1, 5) if rng.random() < 0.3 else None)
    fillers = [add(kind="filler", ref=short[k % len(short)], arrive=rng.randrange(2 * n), max_tokens=rng.randint(1, n))
               for k in range(max(3, slots + 4 - len(refs) - 2 * sampled_pairs))]
    for _ in range(2):  # long decodes: held to one prefill of the same tokens (harness.path_checks.check_long_decode)
        add(kind="long", ref=short[rng.randrange(len(short))], arrive=rng.randrange(n), max_tokens=4 * n)
    for k, r in enumerate(rng.sample(fillers, 3)):  # one while queued, two while they run (long enough not to end first)
        late = {"max_tokens": max(n, 4), "abort_after": 1 + rng.randrange(max(1, n // 2))} if k else {"abort_at": r.arrive}
        out[r.rid] = ScriptRequest(**{**asdict(r), **late})
    for p in range(sampled_pairs):
        t, k, top_p = SAMPLED_SETTINGS[p % len(SAMPLED_SETTINGS)]
        common = {"kind": "sampled", "ref": short[rng.randrange(len(short))], "max_tokens": sampled_tokens, "temperature": t,
                  "top_k": k, "top_p": top_p, "seed": rng.randrange(2**31), "logprobs": rng.randint(1, 5) if p % 2 else None}
        first = add(arrive=rng.randrange(n), **common)
        second = add(arrive=first.arrive if p % 2 else n + rng.randrange(n), twin=first.rid, **common)
        out[first.rid] = ScriptRequest(**{**asdict(first), "twin": second.rid})
    return out


def max_steps(script: list[ScriptRequest], refs: list[ReferenceRun], chunk_hint: int = 1) -> int:
    """A bound no working scheduler reaches: every request run after the other, one prompt token per step."""
    return max(r.arrive for r in script) + sum(len(refs[r.ref].prompt) // chunk_hint + r.max_tokens for r in script) + 16

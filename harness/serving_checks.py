"""Judge parity's serving script (``harness.serving_script``): what the engine's ``Scheduler`` gave each request.

Checks, each a parity failure when broken (docs/PARITY.md, "Serving script"):
- **ends**: a request ends right after its first stop id (``stop_token_ids``, plus EOS unless ``ignore_eos``) with
  ``finish_reason`` ``stop``, else after exactly ``max_tokens`` with ``length``; an aborted one reports ``abort`` and
  got no token at or after its abort; every request finishes (the worker raises on a stalled scheduler);
- **greedy**: a greedy request's tokens follow the reference's continuation of its prompt up to a tie, under the same
  rule as the batched greedy run (``parity_metrics.greedy_agreement``), though it joined while others ran;
- **logprobs**: reported log-probabilities are ``log_softmax`` of the raw logits (before temperature and filters) at
  the sampled token and at the top ids, within the row's own uncertainty;
- **seeds**: the two requests of a sampled pair (same prompt, settings and seed) sample the same tokens. On the CPU
  in all pairs but ``TWIN_EXACT_SLACK``. On a GPU, whose forward may round differently per batch: pairs that ran in
  lockstep (every token at the same step, so their rows are the same batch's rows of the same inputs) in all but
  ``TWIN_EXACT_SLACK``; pairs apart (other steps and neighbours) may differ once a rounding flips a draw, but at
  most a ``TWIN_SLACK`` share of them already at their first token;
- **sampling**: the sampled tokens are draws from the distributions their settings define on the engine's own
  teacher-forced rows (``harness.sampling_stats``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

from harness.parity_engine import EngineApi
from harness.parity_metrics import batch_variation, finite_scale, greedy_agreement, greedy_self_agreement, path_allowance
from harness.path_checks import LONG_FLOOR, LONG_K, check_equal_batch, check_long_decode, check_pieces
from harness.reference import ReferenceRun
from harness.sampling_stats import sample_test
from harness.serving_script import ScriptOutput, ScriptRequest, make_script, max_steps
from harness.worker import EngineError

#: failures named in full; more are counted
SHOWN = 6
#: where the forward is not batch-invariant (a GPU): the share of twins apart (other steps, other neighbours) that may
#: differ at their first token. Their rows differ by the batch's rounding, and a draw near a boundary of the sampler
#: flips: the honest full-size engine on the H200 (2026-12-05, docs/results/h200-2026-12-05) had 2 of 6 pairs differ,
#: both after 2 equal tokens. A sampler that ignores the seed differs at the first token in nearly every pair.
TWIN_SLACK = 0.5
#: pairs that may differ where it is (the CPU): one, since a bf16 row still moves by an ulp when the scheduler mixes
#: prefill and decode tokens in a step, and a draw landing at that row's CDF boundary then flips (the honest tiny bf16
#: engine, prompt nonce 7, seed 1: one pair of 24 differed at its 8th token); a sampler that ignores the seed differs
#: in nearly every pair
TWIN_EXACT_SLACK = 1


@dataclass
class ServingConfig:
    """How parity runs the serving script: ``seed`` draws it (the parity prompt seed), ``eos`` the checkpoint's EOS
    id (None: no EOS request), ``exact`` whether the forward is batch-invariant (the CPU: at most ``TWIN_EXACT_SLACK`` pairs
    of twins may differ), and the
    size of its sampled part: ``pairs`` pairs of ``tokens`` tokens each."""

    seed: int
    eos: int | None
    exact: bool
    pairs: int = 32
    tokens: int = 8


@dataclass
class ServingFigures:
    """What the serving script showed (``RunFigures.serving``).

    Attributes:
        requests, steps: requests in the script and scheduler steps it took. greedy_tokens: greedy tokens compared with
        the reference. samples: sampled tokens tested; z, z_groups, ks, ks_max: ``sampling_stats.SampleTest``'s.
        equal_batch: equal-length prompts together against alone (``path_checks.check_equal_batch``).
        twins_differ / pairs: sampled pairs whose two requests sampled differently, of all pairs; lockstep_pairs: of
        those pairs, the ones that ran in lockstep; twins_differ_first: pairs apart that differed at their first token.
        slack: the largest |alone − batched| logit over the prompts; path: the engine's path noise
            (``parity_checks.path_noise``); both widen the per-row allowances.
        failures: every broken check, in words.
    """

    requests: int = 0
    steps: int = 0
    greedy_tokens: int = 0
    samples: int = 0
    z: float = math.nan
    z_groups: dict[str, float] = field(default_factory=dict)
    ks: float = math.nan
    ks_max: float = math.nan
    twins_differ: int = 0
    pairs: int = 0
    equal_batch: float = math.nan
    lockstep_pairs: int = 0
    twins_differ_first: int = 0
    slack: float = math.nan
    path: float = math.nan
    failures: list[str] = field(default_factory=list)


def _ends(r: ScriptRequest, o: ScriptOutput, eos: int | None) -> str | None:
    """Why request ``r`` ended wrongly, else None."""
    if r.abort_at is not None and o.finish_reason == "abort":
        late = [s for s in o.steps if s >= r.abort_at]
        return f"got {len(late)} token(s) after it was aborted" if late else None
    if r.abort_after is not None and r.abort_after < r.max_tokens:  # aborted right after its abort_after-th token
        if (len(o.tokens), o.finish_reason) != (r.abort_after, "abort") and not _ended_first(r, o, eos):
            return (f"was aborted after its token {r.abort_after} but ended with {len(o.tokens)} token(s) and "
                    f"{o.finish_reason!r}")
        return None
    stop = set(r.stop_token_ids) | ({eos} if eos is not None and not r.ignore_eos else set())
    first = next((k for k, t in enumerate(o.tokens) if t in stop), None)
    want = (first + 1, "stop") if first is not None else (r.max_tokens, "length")
    if r.abort_at is not None and o.finish_reason != "abort" and (o.finished_step is None or o.finished_step >= r.abort_at):
        return f"was aborted before step {r.abort_at} but finished with {o.finish_reason!r}"
    if (len(o.tokens), o.finish_reason) != want:
        return (f"ended after {len(o.tokens)} token(s) with {o.finish_reason!r}; its stop ids {sorted(stop)} and max_tokens "
                f"{r.max_tokens} end it after {want[0]} with {want[1]!r}")
    return None


def _ended_first(r: ScriptRequest, o: ScriptOutput, eos: int | None) -> bool:
    """True when ``o`` ended at a stop id before ``r``'s abort could come (legitimately: checked as a plain end)."""
    stop = set(r.stop_token_ids) | ({eos} if eos is not None and not r.ignore_eos else set())
    return o.finish_reason == "stop" and len(o.tokens) <= (r.abort_after or 0) and bool(o.tokens) and o.tokens[-1] in stop


def _logprob_errors(o: ScriptOutput, rows: torch.Tensor, upto: int, tol: list[float], k: int) -> str | None:
    """The first reported logprob (of tokens ``< upto``) off ``log_softmax(rows[j])`` by more than ``tol[j]``."""
    if len(o.logprobs) != len(o.tokens):
        return f"asked for logprobs, got {len(o.logprobs)} for {len(o.tokens)} tokens"
    for j in range(min(upto, rows.shape[0])):
        ls = torch.log_softmax(rows[j].double(), -1)
        tok, lp, top = o.logprobs[j]
        if tok != o.tokens[j] or not abs(lp - float(ls[tok])) <= tol[j]:
            return f"token {j}: logprob {lp:.4g} of id {tok}, its row says {float(ls[o.tokens[j]]):.4g} (raw logits, before temperature)"
        kth = float(torch.topk(ls, k).values[-1])
        if len(top) != k:
            return f"token {j}: {len(top)} top logprobs reported, {k} asked for"
        for i, v in top:
            if not 0 <= i < ls.shape[0]:
                return f"token {j}: top logprob of id {i}, outside the vocabulary"
            if not abs(v - float(ls[i])) <= tol[j] or float(ls[i]) < kth - 2 * tol[j]:
                return (f"token {j}: its {k} top logprobs are not the row's top {k}: id {i} reported at {v:.4g}, its row "
                        f"says {float(ls[i]):.4g}, the row's {k}th is {kth:.4g} (tolerance {tol[j]:.3g})")
    return None


def check_serving(engine: EngineApi, refs: list[ReferenceRun], alone: list[torch.Tensor], batched: list[torch.Tensor],
                  slots: int, tie_floor: float, decode_threshold: float, cfg: ServingConfig, path: float = 0.0) -> ServingFigures:
    """Run the serving script on ``engine`` and judge it.

    ``alone`` / ``batched``: each prompt's teacher-forced logits (``parity_engine.teacher_forced_logits``), whose
    difference is the greedy slack, and its largest entry how far a sampling row may lie from its teacher-forced one.
    ``decode_threshold``: the run's decode consistency threshold: a prompt prefilled in pieces is held to it against
    its one-call rows, and it scales the long decodes' threshold (``harness.path_checks``). ``path``: the engine's
    measured path noise relative to a row (``parity_checks.path_noise``), by which a greedy token may lie below the
    top-1 of the engine's own row reached by another path.
    Raises what the engine's worker raises (the caller makes it the parity verdict).
    """
    fig = ServingFigures(path=path)
    script = make_script(refs, slots, cfg.seed, sampled_pairs=cfg.pairs, sampled_tokens=cfg.tokens, eos=cfg.eos)
    reply = engine.script([r.prompt for r in refs], [r.to_wire() for r in script], max_steps(script, refs))
    outs = {int(k): ScriptOutput.from_wire(v) for k, v in reply["outputs"].items()}
    fig.requests, fig.steps = len(script), int(reply["steps"])
    bad: list[str] = []
    for r in script:
        o = outs.get(r.rid)
        if o is None:
            bad.append(f"request {r.rid} got no output")
            continue
        why = _ends(r, o, cfg.eos)
        if why:
            bad.append(f"request {r.rid} ({r.kind}, arrived before step {r.arrive}) {why}")
        if r.kind != "sampled":
            bad += _greedy(r, o, refs[r.ref], alone[r.ref], batched[r.ref], tie_floor, fig, path)
    bad += check_pieces(engine, refs, alone, decode_threshold, cfg.seed)
    fig.equal_batch, why = check_equal_batch(engine, refs, decode_threshold, slots, cfg.seed)
    bad += why
    leak = _capacity(engine, refs, slots)
    if leak:  # the sampled rows need the engine's slots: judged on what is known
        return _done(fig, bad + leak)
    slack = max((float(torch.nan_to_num((a - b).abs(), nan=0.0, posinf=0.0).amax()) for a, b in zip(alone, batched)),
                default=0.0)
    fig.slack = slack
    longs = [(refs[r.ref].prompt, outs[r.rid].tokens) for r in script
             if r.kind == "long" and r.rid in outs and len(outs[r.rid].tokens) == r.max_tokens]
    if longs:
        bad += check_long_decode(engine, longs, _teacher_rows(engine, longs, slots),
                                 max(LONG_K * decode_threshold, LONG_FLOOR), slack, tie_floor, path)
    return _done(fig, bad + _sampled(engine, script, outs, refs, slack, tie_floor, cfg, fig, path))


def _done(fig: ServingFigures, bad: list[str]) -> ServingFigures:
    """``fig`` with the first ``SHOWN`` failures in words and a count of the rest."""
    fig.failures = [f"serving script: {b}" for b in bad[:SHOWN]] + ([f"serving script: and {len(bad) - SHOWN} more"]
                                                                      if len(bad) > SHOWN else [])
    return fig


def _capacity(engine: EngineApi, refs: list[ReferenceRun], slots: int) -> list[str]:
    """After the script every slot must be free again: prefill ``slots`` copies of the shortest prompt, release them."""
    prompt = min((r.prompt for r in refs), key=len)
    try:
        res = engine.prefill([prompt] * slots, rows=[[0]] * slots)
    except EngineError as err:
        return [f"after every request finished or was aborted, the engine could not take its {slots} sequences again "
                f"({str(err)[:240]}): a finished or aborted request kept its slot"]
    engine.release(list(res["slots"]))
    return []


def _greedy(r: ScriptRequest, o: ScriptOutput, ref: ReferenceRun, ea: torch.Tensor, eb: torch.Tensor, tie_floor: float,
            fig: ServingFigures, path: float = 0.0) -> list[str]:
    m = min(len(o.tokens), len(ref.continuation))
    if m == 0:
        return []
    rows = slice(ref.split - 1, ref.split - 1 + m)
    slack, noise = batch_variation(ea[rows], eb[rows])
    match, compared = greedy_agreement(o.tokens[:m], ref.continuation[:m], ea[rows], ref.logits[rows], floor_rel=tie_floor, slack=slack)
    fig.greedy_tokens += compared
    out = []
    if match < compared:
        out.append(f"request {r.rid} (greedy, a {len(ref.prompt)}-token prompt, arrived before step {r.arrive}): token "
                   f"{match} is {o.tokens[match]} where the reference has {ref.continuation[match]} and no tie explains it")
    at, ratio = greedy_self_agreement(o.tokens[:m], ref.continuation[:m], ea[rows], floor_rel=tie_floor, slack=slack, noise=noise,
                                       path=path)
    if at < m and match == compared:
        out.append(f"request {r.rid} (greedy, arrived before step {r.arrive}): token {at} ({o.tokens[at]}) is not a top-1 "
                   f"of the engine's own teacher-forced row ({ratio:.3g}x the bound): the scheduler computes otherwise than "
                   "prefill()/decode()")
    if r.logprobs is not None:
        floor = [4 * float(s) + tie_floor * max(1.0, float(finite_scale(ea[ref.split - 1 + j])[0]))
                 + path_allowance(ea[ref.split - 1 + j], path) for j, s in enumerate(slack)]
        why = _logprob_errors(o, ea[rows], match, floor, r.logprobs)
        if why:
            out.append(f"request {r.rid} (greedy, logprobs {r.logprobs}) {why}")
    return out


def _sampled(engine: EngineApi, script: list[ScriptRequest], outs: dict[int, ScriptOutput], refs: list[ReferenceRun],
             slack: float, tie_floor: float, cfg: ServingConfig, fig: ServingFigures, path: float = 0.0) -> list[str]:
    """Twins, logprobs and the sample tests of the sampled pairs; ``slack``: the largest logit difference between
    the engine's alone and batched runs of one prompt, and ``path`` the engine's path noise (``path_allowance``), by
    which a sampling row may lie from its teacher-forced one."""
    bad: list[str] = []
    tested = _twins(script, outs, cfg, fig, bad)
    seqs = [(r, outs[r.rid]) for r in tested if len(outs[r.rid].tokens) == r.max_tokens]  # others failed their ends
    rows = _teacher_rows(engine, [(refs[r.ref].prompt, o.tokens) for r, o in seqs], len(refs))
    rng = random.Random(cfg.seed ^ 0x5A5A)
    flat_rows, toks, settings, deltas = [], [], [], []
    for (r, o), rr in zip(seqs, rows, strict=True):
        d = [2 * slack + tie_floor * max(1.0, float(finite_scale(rr[j])[0])) + path_allowance(rr[j], path)
             for j in range(len(o.tokens))]
        for j, t in enumerate(o.tokens):
            flat_rows.append(rr[j])
            toks.append(t)
            settings.append((r.temperature, r.top_k, r.top_p))
            deltas.append(d[j])
        if r.logprobs is not None:
            why = _logprob_errors(o, rr, len(o.tokens), [2 * x + 1e-4 for x in d], r.logprobs)
            if why:
                bad.append(f"request {r.rid} (sampled at temperature {r.temperature:g}, logprobs {r.logprobs}) {why}")
    test = sample_test(flat_rows, toks, settings, deltas, [rng.random() for _ in toks])
    fig.samples, fig.z, fig.z_groups, fig.ks, fig.ks_max = test.n, test.z, dict(test.z_groups or {}), test.ks, test.ks_max
    return bad + list(test.failures or [])


def _twins(script: list[ScriptRequest], outs: dict[int, ScriptOutput], cfg: ServingConfig, fig: ServingFigures,
           bad: list[str]) -> list[ScriptRequest]:
    """The seed rule over the sampled pairs (module docstring, **seeds**); appends broken rules to ``bad`` and returns
    the requests whose samples the sample test takes (each pair's first, and the twin where the two differ)."""
    tested: list[ScriptRequest] = []
    differ = {"lockstep": [], "apart": [], "apart at token 0": []}
    pairs = {"lockstep": 0, "apart": 0}
    for r in (r for r in script if r.kind == "sampled" and r.twin is not None and r.twin > r.rid):
        a, b = outs.get(r.rid), outs.get(r.twin)
        if a is None or b is None:
            continue
        kind = "lockstep" if a.steps == b.steps else "apart"
        fig.pairs += 1
        pairs[kind] += 1
        tested.append(r)
        if a.tokens != b.tokens:
            fig.twins_differ += 1
            tested.append(script[r.twin])
            said = f"requests {r.rid} and {r.twin} (seed {r.seed}) sampled {a.tokens} and {b.tokens}"
            differ[kind].append(said)
            if kind == "apart" and a.tokens[:1] != b.tokens[:1]:
                differ["apart at token 0"].append(said)
    fig.lockstep_pairs, fig.twins_differ_first = pairs["lockstep"], len(differ["apart at token 0"])
    rules = ([("sampled pairs", fig.twins_differ, fig.pairs, TWIN_EXACT_SLACK, differ["lockstep"] + differ["apart"])]
             if cfg.exact else
             [("sampled pairs run in lockstep", len(differ["lockstep"]), pairs["lockstep"], TWIN_EXACT_SLACK,
               differ["lockstep"]),
              ("sampled pairs apart already at their first token", len(differ["apart at token 0"]), pairs["apart"],
               max(1, int(TWIN_SLACK * pairs["apart"])), differ["apart at token 0"])])
    for what, n, of, allowed, said in rules:
        if n > allowed:
            bad.append(f"{n} of {of} {what} (same prompt, settings and seed) sampled different tokens, more than "
                       f"{allowed}: a request's samples must depend on its seed only (first: {said[0]})")
    return tested


def _teacher_rows(engine: EngineApi, seqs: list[tuple[list[int], list[int]]], slots: int) -> list[torch.Tensor]:
    """The engine's logits along each sampled path, on the path the scheduler sampled them from: the prompt's last
    prefill row, then one ``decode`` per token but the last; float32 [m, V] per sequence (row j predicted token j),
    ``slots`` sequences at a time (the engine's capacity), all of a group decoded together."""
    out: list[torch.Tensor] = []
    for at in range(0, len(seqs), max(1, slots)):
        part = seqs[at : at + slots]
        res = engine.prefill([p for p, _ in part], rows=[[len(p) - 1] for p, _ in part])
        rows = [[lg.float()[-1:]] for lg in res["logits"]]
        try:
            for j in range(len(part[0][1]) - 1):
                step = engine.decode(list(res["slots"]), [t[j] for _, t in part])  # [B, V]
                for k in range(len(part)):
                    rows[k].append(step[k : k + 1].float())
        finally:
            engine.release(list(res["slots"]))
        out += [torch.cat(r) for r in rows]
    return out

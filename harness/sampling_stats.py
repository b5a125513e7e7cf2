"""Is a set of sampled tokens a draw from the distributions the sampling settings define? (parity's serving script)

Each sample is one token ``x`` drawn by the engine from its logits row under (temperature T, top_k, top_p); the
judge has the engine's teacher-forced logits of the same row and builds the target distribution ``q`` itself, in the
order vLLM and HF apply the filters: divide by T, keep the top_k largest, then the smallest set of the tempered
distribution whose mass reaches top_p (a token stays while the mass ranked above it is below top_p), renormalise.

Two tests over all samples together, each at a false-alarm rate near 1e-7 for an honest sampler:
- **mean log-probability** (``z``), over all samples and over the samples of each setting (a cut that makes low
  temperatures lower and high ones higher cancels in the pooled figure, not in its groups):
  ``sum(log q_i(x_i) - E_qi[log q]) / sqrt(sum Var_qi(log q))``, about N(0, 1). A wrong temperature, a sampler that
  is really argmax, or one that drops the tail moves it by many units;
- **randomised PIT** (``ks``): with tokens ranked by q, ``u_i = q_i(ranked above x_i) + U_i q_i(x_i)`` (U_i uniform,
  drawn by the judge) is uniform on [0, 1]; the Kolmogorov-Smirnov distance of the u_i from uniform is held to the
  DKW bound ``sqrt(ln(2 / alpha) / (2 N))``. It sees any misshapen distribution (a truncated tail, a wrong cut).
A sample outside the support of q fails on its own, unless the row's own uncertainty (``delta`` in logits: the
engine's sampling row and its teacher-forced row are different computations) could have put it inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

#: two-sided |z| bound of the pooled figure, of each setting's (a Bonferroni share of the same level), and the KS level
Z_MAX = 5.3
Z_MAX_GROUP = 5.8
KS_ALPHA = 1e-7


def filtered_log_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """log q over the vocabulary (float64 [V], -inf outside the kept set) for fp32 logits [V]; temperature > 0."""
    x = logits.double() / temperature
    if 0 < top_k < x.shape[-1]:
        kth = torch.topk(x, top_k).values[-1]
        x = x.masked_fill(x < kth, -math.inf)
    if top_p < 1.0:
        sx, order = torch.sort(x, descending=True)
        p = torch.softmax(sx, -1)
        before = p.cumsum(-1) - p
        x = x.scatter(0, order, sx.masked_fill(before >= top_p, -math.inf))
    return torch.log_softmax(x, -1)


def could_be_kept(logits: torch.Tensor, token: int, temperature: float, top_k: int, top_p: float, delta: float) -> bool:
    """True when ``token`` is in the kept set once its logit is raised by ``2 * delta`` against every other one (the
    most a row whose every entry may be off by ``delta`` can move it)."""
    x = logits.double().clone()
    x[token] += 2 * delta
    return bool(torch.isfinite(filtered_log_probs(x, temperature, top_k, top_p)[token]))


@dataclass
class SampleTest:
    """The two statistics over N samples and how many samples were left out.

    Attributes:
        n: samples tested. z: the pooled mean-log-probability statistic; z_groups: the same per setting
            (``"T/top_k/top_p"``). ks: the PIT's KS distance; ks_max its bound.
        outside: samples outside the support that the row's uncertainty could explain (left out of both tests).
        failures: in words, each test over its bound.
    """

    n: int = 0
    z: float = 0.0
    z_groups: dict[str, float] | None = None
    ks: float = 0.0
    ks_max: float = 1.0
    outside: int = 0
    failures: list[str] | None = None


def sample_test(rows: list[torch.Tensor], tokens: list[int], settings: list[tuple[float, int, float]], deltas: list[float],
                uniforms: list[float]) -> SampleTest:
    """Test samples ``tokens[i]`` drawn from logits ``rows[i]`` ([V] fp32) under ``settings[i]`` = (T, top_k, top_p),
    each row uncertain by ``deltas[i]`` logits; ``uniforms[i]`` in [0, 1) are the judge's draws for the PIT."""
    res, u = SampleTest(failures=[], z_groups={}), []
    sums: dict[str, list[float]] = {}  # setting -> [sum of deviations, sum of variances]
    for row, x, (t, k, p), d, un in zip(rows, tokens, settings, deltas, uniforms, strict=True):
        lq = filtered_log_probs(row, t, k, p)
        if not 0 <= x < lq.shape[0] or not torch.isfinite(lq[x]):
            if 0 <= x < lq.shape[0] and could_be_kept(row, x, t, k, p, d):
                res.outside += 1
                continue
            rank = int((row > row[x]).sum()) if 0 <= x < row.shape[0] else -1
            res.failures.append(f"sampled token {x} lies outside what temperature {t:g}, top_k {k}, top_p {p:g} keep "
                                f"(rank {rank} of its row)")
            continue
        q = lq.exp()
        keep = torch.isfinite(lq)
        ent = -(q[keep] * lq[keep]).sum().item()
        acc = sums.setdefault(f"{t:g}/{k}/{p:g}", [0.0, 0.0])
        acc[0] += lq[x].item() + ent
        acc[1] += (q[keep] * lq[keep] ** 2).sum().item() - ent**2
        order = torch.argsort(lq, descending=True, stable=True)
        pos = int((order == x).nonzero()[0])
        u.append(min(1.0, q[order[:pos]].sum().item() + un * q[x].item()))
        res.n += 1
    if res.n == 0:
        return res
    res.z = _z(sum(a[0] for a in sums.values()), sum(a[1] for a in sums.values()))
    res.z_groups = {g: _z(*a) for g, a in sums.items()}
    u.sort()
    res.ks = max(max((i + 1) / res.n - v, v - i / res.n) for i, v in enumerate(u))
    res.ks_max = math.sqrt(math.log(2 / KS_ALPHA) / (2 * res.n))
    if abs(res.z) > Z_MAX:
        side = "more likely" if res.z > 0 else "less likely"
        res.failures.append(f"the sampled tokens are {side} under their rows than samples of temperature/top_k/top_p are "
                            f"(z = {res.z:.1f} over {res.n} samples, bound {Z_MAX}): the sampler does not sample the "
                            "distribution the request asked for")
    for g, z in res.z_groups.items():
        if abs(z) > Z_MAX_GROUP:
            res.failures.append(f"the tokens sampled at temperature/top_k/top_p {g} are {'more' if z > 0 else 'less'} likely "
                                f"under their rows than such samples are (z = {z:.1f}, bound {Z_MAX_GROUP})")
    if res.ks > res.ks_max:
        res.failures.append(f"the sampled tokens' ranks are not distributed as their rows say (KS distance {res.ks:.3f} > "
                            f"{res.ks_max:.3f} over {res.n} samples): the sampler's distribution is misshapen "
                            "(a truncated tail, a wrong filter)")
    return res


def _z(dev: float, var: float) -> float:
    """A sum of deviations over the square root of the sum of their variances; 0 where nothing varies."""
    return dev / math.sqrt(var) if var > 1e-12 else 0.0

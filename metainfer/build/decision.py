"""Accept or reject a candidate from its gate result, and the commit trailers that carry the figures.

The rule (DESIGN.md "The build loop"): a candidate is accepted iff the gate ran to the end
without error, every stage before the benchmark is green, parity holds, and the benchmark
says the candidate beats the best engine by more than the measured spread
(``bench.objective.beats_baseline``, decided inside the frozen gate, never here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metainfer.build.gate_runner import GateOutcome

#: workload name -> trailer key, in trailer order (DESIGN.md "Benchmark workloads")
WORKLOAD_TRAILERS = {"ttft": "TTFT-ms", "decode-bs1": "Decode-BS1-Tok-S", "conc32": "Conc32-Tok-S",
                     "conc64": "Conc64-Tok-S", "conc128": "Conc128-Tok-S", "ttft-2k": "TTFT-2k-ms", "ttft-8k": "TTFT-8k-ms",
                     "prefill-16k": "Prefill-16k-Tok-S"}


@dataclass(frozen=True)
class Decision:
    """The verdict on one gate run: ``accepted`` and a one-line ``reason`` a person can read."""

    accepted: bool
    reason: str


def as_float(x: Any) -> float | None:
    """A gate figure as a float: numbers as they are, numeric strings (the gate writes non-finite values such as
    ``"nan"``/``"inf"`` as strings, JSON having no NaN) parsed, anything else None."""
    if isinstance(x, bool) or x is None:
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def figures(result: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers of a gate JSON (schema 1), None where the gate did not get that far.

    Keys: ``parity_ok``, ``max_rel_err``, ``tolerance`` (prefill logits), ``max_decode_rel_err``,
    ``decode_tolerance`` (teacher-forced decode logits), ``speedup``, ``noise``, ``beats_baseline``,
    ``scaled_down``, ``roofline_fraction`` (decode-bs1's, else the first workload's), and per workload
    ``workloads[name] = {"unit", "candidate", "baseline", "spread", "higher_is_better", "ratios"}`` (medians;
    ``ratios``: the paired per-round ratios, > 1 where the candidate won the round), and ``sharp``: ``sharp_parity``.
    """
    parity = result.get("parity") or {}
    bench = result.get("bench") or {}
    objective = bench.get("objective") or {}
    workloads = {}
    roofline = None
    for name, w in (bench.get("workloads") or {}).items():
        cand, base = w.get("candidate") or {}, w.get("baseline") or {}
        workloads[name] = {"unit": w.get("unit"), "candidate": as_float(cand.get("median")),
                           "baseline": as_float(base.get("median")), "spread": as_float(cand.get("spread")),
                           "higher_is_better": w.get("higher_is_better", True),
                           "ratios": [r for r in map(as_float, w.get("ratios") or []) if r is not None]}
        if as_float(w.get("roofline_fraction")) is not None and (roofline is None or name == "decode-bs1"):
            roofline = as_float(w["roofline_fraction"])
    return {"parity_ok": parity.get("ok"), "max_rel_err": as_float(parity.get("max_rel_err")),
            "tolerance": as_float(parity.get("tolerance")),
            "max_decode_rel_err": as_float(parity.get("max_decode_rel_err")),
            "decode_tolerance": as_float(parity.get("decode_tolerance")),
            "speedup": as_float(objective.get("speedup")), "noise": as_float(objective.get("noise")),
            "beats_baseline": objective.get("beats_baseline"), "scaled_down": bench.get("scaled_down"),
            "roofline_fraction": roofline, "workloads": workloads, "sharp": sharp_parity(parity)}


def sharp_parity(parity: dict[str, Any]) -> list[dict[str, Any]]:
    """The sharp parity checks of a gate's ``parity`` section, the worst of each kind as ``{"check", "figure",
    "threshold"}`` (docs/PARITY.md, "Layer-local parity" and "Consistency"): the worst layer's layer-local update
    (by its fraction of its own threshold), the final norm + lm_head, the worst consistency figure. Empty for a gate
    that did not get that far or an older gate JSON."""
    out: list[dict[str, Any]] = []
    errs, tols = parity.get("local_update_errors") or [], parity.get("local_update_tolerances") or []
    pairs = [(i, as_float(e), as_float(t)) for i, (e, t) in enumerate(zip(errs, tols))]
    pairs = [(i, e, t) for i, e, t in pairs if e is not None and t]
    if pairs:
        i, e, t = max(pairs, key=lambda x: x[1] / x[2])
        out.append({"check": f"layer-local update, layers.{i} (worst of {len(pairs)})", "figure": e, "threshold": t})
    lm, lm_tol = as_float(parity.get("local_logits_err")), as_float((parity.get("tolerances") or {}).get("local_logits"))
    if lm is not None and lm_tol:
        out.append({"check": "final norm + lm_head", "figure": lm, "threshold": lm_tol})
    cons, cons_tol = parity.get("consistency") or {}, parity.get("consistency_tolerances") or {}
    rows = [(k, as_float(v), as_float(cons_tol.get(k))) for k, v in cons.items()]
    rows = [(k, v, t) for k, v, t in rows if v is not None and t]
    if rows:
        k, v, t = max(rows, key=lambda x: x[1] / x[2])
        own = as_float((parity.get("reference_consistency") or {}).get(k.split()[0]))
        note = f"; HF's own {own:.2g}" if own is not None else ""
        out.append({"check": f"consistency, {k} (worst of {len(rows)}{note})", "figure": v, "threshold": t})
    return out


def parity_failure(f: dict[str, Any], error: str | None = None) -> str | None:
    """Why parity failed, from ``figures`` and the stage's ``error`` (the gate's list of failed checks): the per-prompt
    nets that broke their tolerance first, then the failed checks; when the nets held (a sharper check failed:
    layer-local, consistency, greedy tokens, batching), the failed checks first and the nets after them. None when
    the gate JSON has neither."""
    if f["max_rel_err"] is None:
        return error or None
    over = []
    if f["tolerance"] is not None and not f["max_rel_err"] <= f["tolerance"]:
        over.append(f"max rel err {f['max_rel_err']:.3g} > tolerance {f['tolerance']}")
    dec, dtol = f.get("max_decode_rel_err"), f.get("decode_tolerance")
    if dec is not None and dtol is not None and not dec <= dtol:
        over.append(f"max decode rel err {dec:.3g} > tolerance {dtol}")
    if over:
        return "; ".join(over) + (f" ({error})" if error else "")
    decode = f", decode {dec:.3g} of {dtol}" if dec is not None else ""
    nets = f"the per-prompt nets held: prefill rel err {f['max_rel_err']:.3g} of {f['tolerance']}{decode}"
    return f"{error} ({nets})" if error else f"another check failed ({nets})"


def _first_red(outcome: GateOutcome, before_bench: bool) -> str | None:
    """Why the gate is red before (or, with ``before_bench=False``, including) the benchmark; None if it is not."""
    if outcome.timed_out or outcome.error:
        return outcome.error or "gate timed out"
    for st in outcome.gate.stages:
        what = "failed" if st.verdict in ("pass", "fail") else st.verdict  # timeout, crashed, tampered
        if before_bench and st.name == "bench":
            if st.error or not st.ok:
                return f"bench {what}: {st.error or 'red'}"
            continue
        if not st.ok:
            if st.name == "parity" and st.verdict == "fail":
                why = parity_failure(figures(outcome.result), st.error)
                if why:
                    return f"parity failed: {why}"
            return f"{st.name} {what}: {st.error or 'red'}"
    return None


def aa_margin(noise_run: dict[str, Any] | None) -> float | None:
    """The margin a candidate must clear beyond the gate's own noise bar: the part of the noise run's offset
    that its own noise cannot explain, ``max(0, |speedup − 1| − noise)`` (iteration 0, the engine raced
    against a copy of itself), or None without one.

    Why: each engine runs in a worker process of its own, and two processes of the same engine can differ
    steadily (seen on the H200, 2026-12-02: an engine against itself at 1.107 ± 0.008 over 2 rounds, every
    round "won"), which a per-gate noise bar from a few rounds cannot see; the noise run measures that
    offset for this machine and engine. Only the offset beyond its noise counts: a noise run on shared
    cores (0.638 ± 10.4 was seen) measures nothing steady, and charging its whole bar to every later
    candidate would reject all of them.
    """
    if not noise_run:
        return None
    objective = ((noise_run.get("bench") or {}).get("objective")) or {}
    speedup, noise = as_float(objective.get("speedup")), as_float(objective.get("noise"))
    if speedup is None or noise is None:
        return None
    return max(0.0, abs(speedup - 1.0) - noise)


#: a noise run further off 1.0 than this beyond its own noise, or noisier than ``UNSTEADY_NOISE``, makes the report warn
UNSTEADY_MARGIN, UNSTEADY_NOISE = 0.1, 0.25


def noise_run_note(noise_run: dict[str, Any] | None) -> str | None:
    """One sentence for the run report about iteration 0's noise run (the engine against a copy of itself): its
    speedup and noise, the margin it sets (``aa_margin``), and a warning when the machine's timings were unsteady;
    None without a measured one."""
    objective = (((noise_run or {}).get("bench") or {}).get("objective")) or {}
    speedup, noise, margin = as_float(objective.get("speedup")), as_float(objective.get("noise")), aa_margin(noise_run)
    if speedup is None or margin is None:
        return None
    note = (f"Noise run: the baseline raced against a copy of itself came out {speedup_text(speedup, noise)}. "
            + (f"That is {margin:.3f} further from 1 than its own noise explains, so a candidate is accepted only "
               f"above {1 + margin:.3f}× (speedup − 1 must exceed {margin:.3f}), besides winning every round by more "
               f"than its own noise." if margin > 0 else
               "That is within its own noise of 1, so no margin is added (speedup − 1 must exceed 0.000): a candidate "
               "is accepted when it wins every round by more than its own noise."))
    if margin > UNSTEADY_MARGIN or (noise or 0.0) > UNSTEADY_NOISE:
        note += (" The same engine did not time the same twice: this machine was unsteady (other jobs on these "
                 "cores?), so a small speedup here means little; rerun on idle cores to trust one.")
    return note


def speedup_text(speedup: Any, noise: Any, fmt: str = ".3f") -> str:
    """``1.234× ± 5.6 %``: a paired speedup with its noise, which is relative (half the relative range of the paired
    ratios), so it is printed as a percentage; an en dash without a speedup."""
    if speedup is None:
        return "–"
    return f"{format(speedup, fmt)}× ± {100 * (noise or 0.0):.1f} %"


def decide(outcome: GateOutcome, margin: float | None = None) -> Decision:
    """Accept iff green up to the benchmark, parity ok, the gate says the candidate beats the best engine and,
    when ``margin`` (``aa_margin`` of the run's noise run) is given, the speedup clears it too."""
    red = _first_red(outcome, before_bench=True)
    if red:
        return Decision(False, red)
    f = figures(outcome.result)
    if not f["parity_ok"]:
        return Decision(False, "parity did not run or did not pass")
    if f["speedup"] is None:
        return Decision(False, "no benchmark objective in the gate result")
    sp = f"speedup {speedup_text(f['speedup'], f['noise'])}"
    if f["beats_baseline"] is True and margin is not None and not f["speedup"] - 1.0 > margin:
        return Decision(False, f"within the noise run's margin: {sp}, but the engine raced against itself was "
                               f"{margin:.3f} off 1.0 (speedup - 1 must exceed it)")
    if f["beats_baseline"] is True:
        return Decision(True, f"faster: {sp}")
    if f["speedup"] < 1.0 - (f["noise"] or 0.0):
        return Decision(False, f"slower: {sp}")
    lost = lost_rounds(f)
    if f["speedup"] - 1.0 > (f["noise"] or 0.0) and lost:
        return Decision(False, f"not faster in every round: {sp}, but {lost}")
    return Decision(False, f"within noise: {sp}")


def lost_rounds(f: dict[str, Any]) -> str | None:
    """The paired rounds the candidate did not win, from ``figures`` (``"ttft lost round 2 of 3 (ratio 0.912)"``,
    joined with "; "), or None when it won them all. The gate accepts only a candidate that won every round of
    every workload (``harness.stats.objective``), so a speedup beyond its noise bar can still be rejected."""
    out = []
    for name, w in f["workloads"].items():
        rs = w.get("ratios") or []
        out += [f"{name} lost round {i + 1} of {len(rs)} (ratio {r:.3f})" for i, r in enumerate(rs) if not r > 1.0]
    return "; ".join(out) or None


def decide_baseline(outcome: GateOutcome) -> Decision:
    """Iteration 0: the engine raced against itself must pass every stage up to and through the benchmark's run."""
    red = _first_red(outcome, before_bench=True)
    if red:
        return Decision(False, red)
    f = figures(outcome.result)
    if not f["parity_ok"]:
        return Decision(False, "parity did not run or did not pass")
    err = "–" if f["max_rel_err"] is None else f"{f['max_rel_err']:.3g}"
    return Decision(True, f"baseline: parity max rel err {err}, noise {f['noise'] or 0:.3f}")


def trailers(result: dict[str, Any], gate_seed: int, run_id: str, iteration: int) -> dict[str, str]:
    """Commit trailers for an accepted gate result (keys as in docs/CONTRACTS.md; absent figures left out)."""
    f = figures(result)
    out: dict[str, str] = {}
    if f["max_rel_err"] is not None:
        out["Parity-Max-Rel-Err"] = f"{f['max_rel_err']:.4g}"
    for name, key in WORKLOAD_TRAILERS.items():
        w = f["workloads"].get(name)
        if w and w["candidate"] is not None:
            out[key] = f"{w['candidate']:.4g}"
    on_cpu = str(result.get("device") or "").startswith("cpu")  # the gate JSON's device
    if f["roofline_fraction"] is not None and not on_cpu:  # a CPU run's fraction of a GPU roofline means nothing
        out["Roofline-Fraction"] = f"{f['roofline_fraction']:.4g}"
    if f["speedup"] is not None:
        out["Speedup"] = f"{f['speedup']:.4f}"
        out["Noise"] = f"{f['noise'] or 0:.4f}"
    if f["scaled_down"]:
        out["Scaled-Down"] = "true"
    out.update({"Gate-Seed": str(gate_seed), "Run-Id": run_id, "Iteration": str(iteration)})
    return out


def commit_message(summary: str, trailer_map: dict[str, str]) -> str:
    """``summary`` (first line kept to one line), a blank line, then ``Key: value`` trailers."""
    head = " ".join(summary.split()) or "metainfer candidate"
    return head + "\n\n" + "\n".join(f"{k}: {v}" for k, v in trailer_map.items()) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    """The ``Key: value`` trailers of a commit message (last paragraph)."""
    last = message.strip().split("\n\n")[-1]
    out = {}
    for line in last.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key and " " not in key:
            out[key] = value.strip()
    return out

"""Where the first greedy divergence of each parity prompt lands against the tie bound, old rule and new.

For every prompt and mode of a parity run whose engine greedy tokens differ from the reference's, prints the
first divergence's reference gap over the tie bound of ``harness.parity_metrics.greedy_agreement`` without the
row allowance (old) and with it (new), and over the rms of the row's error. Above 1.0 is a reject.

    OMP_NUM_THREADS=1 python scripts/greedy_tie_sweep.py --attempts honest,generate_only_fp8_acts --nonces 1-3

Runs on the CPU tiny target only (the attempts' engine and checkpoint, ``metainfer.attempts.setup``); an attempt
other than ``honest`` is a ``tests/cheats`` module applied to the rendered engine.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    import harness.parity_checks as checks
    from harness.parity import run_parity
    from harness.parity_metrics import greedy_agreement
    from metainfer.attempts.setup import cached_checkpoint, render_tiny

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attempts", default="honest", help="comma-separated: honest and/or tests/cheats module names")
    ap.add_argument("--nonces", default="1-3", help="prompt nonces, 'A-B' inclusive")
    a = ap.parse_args(argv)
    lo, _, hi = a.nonces.partition("-")
    seen: list[tuple[float, float, float]] = []

    def recording(engine, reference, e, r, *, floor_rel, slack=None):  # the judge's own rule, figures noted
        for j, (g, c) in enumerate(zip(engine, reference)):
            if g != c:
                diff = (e[j] - r[j]).double()
                rms, gap = float(diff.square().mean().sqrt()), float(r[j, c] - r[j, g])
                rest = floor_rel * float(r[j].abs().max()) + 2 * float(slack[j] if slack is not None else 0.0)
                old = float(diff[g].abs() + diff[c].abs()) + rest
                new = sum(max(float(diff[i].abs()), 3 * rms) for i in (g, c)) + rest
                seen.append((gap / old, gap / new, gap / rms))
                break
        return greedy_agreement(engine, reference, e, r, floor_rel=floor_rel, slack=slack)

    checks.greedy_agreement = recording
    for attempt in a.attempts.split(","):
        for nonce in range(int(lo), int(hi or lo) + 1):
            with tempfile.TemporaryDirectory(prefix="metainfer-sweep-") as tmp:
                engine = render_tiny(Path(tmp), "bf16")
                if attempt != "honest":
                    importlib.import_module(f"tests.cheats.{attempt}").apply(engine)
                seen.clear()
                res = run_parity(engine, cached_checkpoint(ROOT, "bf16"), seed=1, prompt_nonce=nonce)
                worst = sorted(seen, reverse=True)[:6]
                own = sorted(((p.greedy_self, p.name) for p in res.prompts if p.greedy_self == p.greedy_self), reverse=True)[:4]
                print(f"{attempt} nonce {nonce} {res.verdict}: gap/old bound, gap/new bound, gap/rms (worst 6): "
                      + ", ".join(f"({o:.2f}, {n:.2f}, {g:.1f})" for o, n, g in worst)
                      + "; own-row gap/bound (worst 4): " + ", ".join(f"{x:.2f} {n}" for x, n in own), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

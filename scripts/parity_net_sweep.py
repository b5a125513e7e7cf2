"""Honest spread of every parity figure on one prompt set: the unmutated tiny engine over many prompt nonces.

Prints, per nonce, each run-level figure as a fraction of its threshold (1.0 = at the threshold), and at the
end the worst fraction per figure. Used to place the nets' thresholds (docs/PARITY.md, "Tolerances").

    OMP_NUM_THREADS=1 python scripts/parity_net_sweep.py --quant bf16 --lengths 1,17 --steps 2 --nonces 1-20

Runs on the CPU tiny target only (the attempts' engine and checkpoint, ``metainfer.attempts.setup``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _nonces(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def fractions(res) -> dict[str, float]:
    """Each run-level figure of a ``ParityResult`` over its threshold; the worst layer for per-layer figures."""
    from harness.tolerances import Tolerance

    tol = Tolerance(**res.tolerances)
    out = {
        "prefill": res.max_rel_err / res.tolerance,
        "decode": res.max_decode_rel_err / res.decode_tolerance,
        "pooled_update": max(x / tol.update(l) for l, x in enumerate(res.update_errors or [0.0])),
    }
    if res.local_update_errors:
        out["local_update"] = max(x / t for x, t in zip(res.local_update_errors, res.local_update_tolerances))
    if res.local_logits_err is not None:
        out["local_logits"] = res.local_logits_err / tol.local_logits
    for name, value in (res.consistency or {}).items():
        limit = (res.consistency_tolerances or {}).get(name)
        if value is not None and limit:
            out[f"consistency.{name}"] = value / limit
    sv = res.serving or {}
    eq, limit = sv.get("equal_batch"), (res.consistency_tolerances or {}).get("decode batched")
    if eq is not None and limit and eq == eq:
        out["serving.equal_batch"] = eq / limit
    return out


def gate_parity(engine: Path, ckpt: Path, nonce: int):
    """The CPU gate's parity of ``engine`` against ``ckpt`` with prompt seed and nonce ``nonce``, in process: the gate's
    lengths (bench lengths added) and engine capacity (so the wide batch runs). Returns the ``ParityResult``."""
    from harness.gate import parse_args
    from harness.gate_stages import gate_capacity, parity_lengths
    from harness.parity import run_parity

    g = parse_args(["--engine", str(engine), "--checkpoint", str(ckpt), "--gpu", "cpu", "--json", "/dev/null",
                    "--seed", str(nonce)])
    return run_parity(engine, ckpt, seed=nonce, lengths=parity_lengths(g), prompt_nonce=nonce,
                      load_capacity=gate_capacity(g))


def main(argv: list[str] | None = None) -> int:
    from harness.parity import run_parity
    from metainfer.attempts.setup import cached_checkpoint, render_tiny

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quant", default="bf16", choices=["bf16", "nvfp4"])
    ap.add_argument("--lengths", default="1,17", help="prompt lengths (the quick gate's by default)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--nonces", default="1-20", help="prompt nonces, 'A-B' inclusive")
    ap.add_argument("--json", type=Path, help="write every run's fractions here")
    ap.add_argument("--gate", action="store_true", help="the CPU gate's parity instead: its lengths (bench lengths "
                    "added), its engine capacity (so the wide batch runs) and its serving script; --lengths/--steps ignored")
    a = ap.parse_args(argv)
    lengths = tuple(int(x) for x in a.lengths.split(","))
    rows, worst = [], {}
    with tempfile.TemporaryDirectory(prefix="metainfer-sweep-") as tmp:
        engine = render_tiny(Path(tmp), a.quant)
        ckpt = cached_checkpoint(ROOT, a.quant)
        for nonce in _nonces(a.nonces):
            if a.gate:
                res = gate_parity(engine, ckpt, nonce)
            else:
                res = run_parity(engine, ckpt, seed=1, lengths=lengths, steps=a.steps, prompt_nonce=nonce)
            f = fractions(res)
            rows.append({"nonce": nonce, "verdict": res.verdict, "fractions": f, "failures": res.update_failures})
            for k, v in f.items():
                worst[k] = max(worst.get(k, 0.0), v)
            print(f"nonce {nonce:3d} {res.verdict:5s} " + " ".join(f"{k}={v:.2f}" for k, v in f.items()), flush=True)
    print("worst: " + " ".join(f"{k}={v:.2f}" for k, v in worst.items()))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

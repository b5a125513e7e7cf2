"""The tolerance anchor: HF's model in bfloat16 against the same model in float32 (docs/PARITY.md, "The anchor").

``python -m harness.anchor --checkpoint DIR --seed S [--device cpu]`` prints one JSON line per
prompt with the parity figures of HF-bf16 measured against HF-fp32 on the same tokens (the
prompts of ``harness.prompts`` with the fp32 reference's greedy continuation). It uses no
tolerance; docs/PARITY.md records its output and sets the tolerances from it.
``python -m harness.anchor --summarize A.jsonl [B.jsonl ...]`` prints the aggregate figures of
saved runs (the table rows of docs/PARITY.md, including the per-layer envelope and, per saved run, the
per-layer update error pooled over its prompts).
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from harness.parity_metrics import layer_errors, layer_update_errors, max_abs, rel_l2, top2_margin
from harness.prompts import DECODE_STEPS, make_prompts
from harness.reference import Reference


def measure_anchor(checkpoint: str, seed: int, *, device: str = "cpu", steps: int = DECODE_STEPS) -> list[dict]:
    """HF-bf16 vs HF-fp32 per prompt.

    Returns one dict per prompt: ``prompt_rel`` / ``decode_rel`` (relative L2 of the prefill
    rows [P, V] and of the ``steps`` decode rows), ``max_abs`` (logits), ``max_row_rel`` (worst
    single row), ``layers`` (relative L2 per hidden state [L + 1]), ``flips`` (decode rows
    whose argmax differs), ``updates`` (relative L2 per layer's residual update [L]) and ``flips_beyond_ties`` (of those, rows whose fp32 top-2 margin is at
    least twice the row's max abs error: flips the greedy tie rule would not excuse).

    Raises:
        metainfer.errors.CheckpointError: the checkpoint does not validate.
    """
    r32 = Reference.from_checkpoint(checkpoint, device=device, dtype=torch.float32)
    r16 = Reference.from_checkpoint(checkpoint, device=device, dtype=torch.bfloat16)
    rows = []
    for p in make_prompts(seed, r32.vocab_size):
        run = r32.run(p.tokens, steps)
        tokens = run.prompt + run.continuation
        a, b = run.logits, r16.logits(tokens)  # [P + n, V]
        n = len(p.tokens)
        dec = slice(n - 1, n - 1 + steps)  # rows that predict the continuation
        delta = (b - a).abs().amax(-1)
        flips = a[dec].argmax(-1) != b[dec].argmax(-1)
        rows.append({
            "prompt": p.name,
            "prompt_rel": rel_l2(b[:n], a[:n]),
            "decode_rel": rel_l2(b[n:], a[n:]),
            "max_abs": max_abs(b, a),
            "max_row_rel": float(((b - a).norm(dim=-1) / a.norm(dim=-1)).max()),
            "layers": layer_errors(h16 := r16.hidden_states(tokens), h32 := r32.hidden_states(tokens)),
            "updates": layer_update_errors(h16, h32),
            # squared-error sums per layer update, so runs can be pooled over prompts (summarize_runs)
            "update_sq_err": (h16.double().diff(dim=0) - h32.double().diff(dim=0)).pow(2).sum(dim=(1, 2)).tolist(),
            "update_sq_ref": h32.double().diff(dim=0).pow(2).sum(dim=(1, 2)).tolist(),
            "flips": int(flips.sum()),
            "flips_beyond_ties": int((flips & (top2_margin(a[dec]) >= 2 * delta[dec].double())).sum()),
        })
    return rows


def hidden_envelope(layers: list[list[float]], max_slope: float = 0.1, step: float = 1e-4) -> tuple[float, float]:
    """The least-area envelope ``a + b · i`` (i = 1 … L) over per-prompt hidden gaps ``layers`` [prompts][L + 1]:
    for each slope b on a grid of ``step`` in [0, max_slope], the smallest a with every gap at or below the line,
    keeping the (a, b) with the least sum over i. Units: relative L2. Returns ``(a, b)``.

    Raises:
        ValueError: no prompt, or a prompt with no layer after the embeddings.
    """
    if not layers or min(len(x) for x in layers) < 2:
        raise ValueError("hidden_envelope needs per-prompt gaps with at least one layer after the embeddings")
    n = min(len(x) for x in layers)
    best = None
    for j in range(int(round(max_slope / step)) + 1):
        b = j * step
        a = max(x[i] - b * i for x in layers for i in range(1, n))
        area = (n - 1) * a + b * n * (n - 1) / 2
        if best is None or area < best[0]:
            best = (area, a, b)
    return best[1], best[2]


def summarize(rows: list[dict]) -> dict:
    """Aggregate ``measure_anchor`` rows (one or several checkpoints): median / max of the prefill and decode
    relative L2, max abs (logits), worst row, the max and median gap per hidden index, the largest
    ``gap(i) / i``, the envelope of :func:`hidden_envelope`, and argmax flips (total, beyond ties, rows).

    Raises:
        ValueError: ``rows`` is empty.
    """
    if not rows:
        raise ValueError("no anchor rows to summarize")
    pr, dr, lay = [r["prompt_rel"] for r in rows], [r["decode_rel"] for r in rows], [r["layers"] for r in rows]
    n = min(len(x) for x in lay)
    a, b = hidden_envelope(lay)
    return {
        "prompts": len(rows),
        "prefill_rel_median": statistics.median(pr), "prefill_rel_max": max(pr),
        "decode_rel_median": statistics.median(dr), "decode_rel_max": max(dr),
        "max_abs": max(r["max_abs"] for r in rows), "max_row_rel": max(r["max_row_rel"] for r in rows),
        "hidden_max": [max(x[i] for x in lay) for i in range(n)],
        "hidden_median": [statistics.median(x[i] for x in lay) for i in range(n)],
        "max_slope": max(x[i] / i for x in lay for i in range(1, n)),
        "envelope_offset": a, "envelope_slope": b,
        "flips": sum(r["flips"] for r in rows), "flips_beyond_ties": sum(r["flips_beyond_ties"] for r in rows),
        **_update_summary([r["updates"] for r in rows if "updates" in r]),
    }


def _update_summary(upd: list[list[float]]) -> dict:
    """Max and median per layer of the residual-update gaps, their least-area envelope ``a + b · l``
    (l = 1 … L, the layer's index + 1); empty when the rows predate the figure."""
    if not upd:
        return {}
    n = min(len(x) for x in upd)
    a, b = hidden_envelope([[0.0, *x] for x in upd])
    return {"update_max": [max(x[i] for x in upd) for i in range(n)],
            "update_median": [statistics.median(x[i] for x in upd) for i in range(n)],
            "update_envelope_offset": a, "update_envelope_slope": b}


def pooled_updates(rows: list[dict]) -> list[float]:
    """Per-layer update error pooled over one run's prompts (``parity_metrics.pooled_update_errors`` of the
    anchor): ``sqrt(Σ sq_err / Σ sq_ref)`` per layer.

    Raises:
        ValueError: no row carries the sums.
    """
    rows = [r for r in rows if "update_sq_err" in r]
    if not rows:
        raise ValueError("no anchor rows with update_sq_err / update_sq_ref (measured before the figure existed)")
    n = min(len(r["update_sq_err"]) for r in rows)
    return [(sum(r["update_sq_err"][i] for r in rows) / sum(r["update_sq_ref"][i] for r in rows)) ** 0.5 for i in range(n)]


def main() -> None:
    """Command line: print ``measure_anchor``'s rows as JSON lines, or ``summarize`` saved ones."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL", help="aggregate saved runs instead of measuring")
    args = ap.parse_args()
    if args.summarize:
        runs = [[json.loads(line) for line in open(path) if line.strip()] for path in args.summarize]
        out = summarize([r for run in runs for r in run])
        pooled = [pooled_updates(run) for run in runs if any("update_sq_err" in r for r in run)]
        if pooled:  # one figure per saved run (a checkpoint and prompt seed), then the worst run per layer
            out["pooled_update_runs"] = pooled
            out["pooled_update_max"] = [max(p[i] for p in pooled) for i in range(min(len(p) for p in pooled))]
        print(json.dumps(out))
        return
    if not args.checkpoint:
        ap.error("--checkpoint DIR is required (or --summarize saved.jsonl ...)")
    for row in measure_anchor(args.checkpoint, args.seed, device=args.device):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

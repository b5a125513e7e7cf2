"""The tolerance anchor: HF's model in bfloat16 against the same model in float32 (docs/PARITY.md, "The anchor").

``python -m harness.anchor --checkpoint DIR --seed S [--device cpu]`` prints one JSON line per
prompt with the parity figures of HF-bf16 measured against HF-fp32 on the same tokens (the
prompts of ``harness.prompts`` with the fp32 reference's greedy continuation). It uses no
tolerance; docs/PARITY.md records its output and sets the tolerances from it.
"""

from __future__ import annotations

import argparse
import json

import torch

from harness.parity_metrics import layer_errors, max_abs, rel_l2, top2_margin
from harness.prompts import DECODE_STEPS, make_prompts
from harness.reference import Reference


def measure_anchor(checkpoint: str, seed: int, *, device: str = "cpu", steps: int = DECODE_STEPS) -> list[dict]:
    """HF-bf16 vs HF-fp32 per prompt.

    Returns one dict per prompt: ``prompt_rel`` / ``decode_rel`` (relative L2 of the prefill
    rows [P, V] and of the ``steps`` decode rows), ``max_abs`` (logits), ``max_row_rel`` (worst
    single row), ``layers`` (relative L2 per hidden state [L + 1]), ``flips`` (decode rows
    whose argmax differs) and ``flips_beyond_ties`` (of those, rows whose fp32 top-2 margin is at
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
            "layers": layer_errors(r16.hidden_states(tokens), r32.hidden_states(tokens)),
            "flips": int(flips.sum()),
            "flips_beyond_ties": int((flips & (top2_margin(a[dec]) >= 2 * delta[dec].double())).sum()),
        })
    return rows


def main() -> None:
    """Command line: print ``measure_anchor``'s rows as JSON lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    for row in measure_anchor(args.checkpoint, args.seed, device=args.device):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

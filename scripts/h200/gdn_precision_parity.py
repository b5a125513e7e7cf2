"""Full-size GPU parity of the engine with the GDN chunk dots at each precision (``--precisions``; the template's default
is tf32).

Writes ``<out>/gdn_precision.jsonl``: one line per precision with the run-level figures (consistency per mode,
its thresholds, the worst layer-local update and lm_head as fractions of their thresholds) of
``harness.parity.run_parity`` on the prompt lengths given (default the mutation suite's short set), both engines
sharing one bf16 reference (``metainfer.mutants.runner.ParityJudge``). The checkpoint must exist (``--ckpt``).

``source scripts/h200/env.sh && python3 scripts/h200/gdn_precision_parity.py --ckpt /tmp/ck --out $OUT``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from metainfer.commands.mutants import _parse_lengths
from metainfer.mutants.catalogue import OPS_GDN, Edit, Mutant, by_name
from metainfer.mutants.runner import ParityJudge, _figure, apply_mutant
from metainfer.render import render_engine
from metainfer.targets import make_target

DEFAULT = 'prec = dot_precision or ("ieee" if INTERPRET else "tf32")'


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--precisions", default="tf32x3,tf32")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--model", default="qwen3.6-35b-a3b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--also", action="append", default=[], help="a catalogue mutant also judged on top of each precision")
    p.add_argument("--lengths", default="65,2049,3000-4000", help="comma list; a-b: drawn from the seed in [a, b]")
    args = p.parse_args()
    lengths = _parse_lengths(args.lengths)
    judge = ParityJudge(Path(args.ckpt), device=args.device, seed=args.seed, lengths=lengths, steps=32)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = Path(args.out) / "gdn_precision.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        base = render_engine(make_target(args.model, "nvfp4", "h200"), Path(tmp) / "r", force=True)
        try:
            for prec in args.precisions.split(","):
                # the variant as a one-edit patch: apply_mutant raises MutantDriftError if the default line changed
                edit = Edit(OPS_GDN, DEFAULT, DEFAULT.replace('"tf32")', f'"{prec}")'))
                for also in [None, *args.also]:
                    name = prec if also is None else f"{prec}+{also}"
                    edits = (edit,) if also is None else (edit, *by_name(also).edits)
                    eng = apply_mutant(Mutant(name, f"GDN chunk dots at {prec}", "-", edits), base, Path(tmp) / name / base.name)
                    _judge_row(judge, eng, name, out)
        finally:
            judge.close()
    return 0


def _judge_row(judge: ParityJudge, eng: Path, prec: str, out: Path) -> None:
    t0 = time.perf_counter()
    r = judge(eng)
    row = {"precision": prec, "ok": r.ok, "seconds": time.perf_counter() - t0, "figure": _figure(r),
           "consistency": r.consistency, "consistency_tolerances": r.consistency_tolerances,
           "local_update_errors": r.local_update_errors, "local_update_tolerances": r.local_update_tolerances,
           "local_logits_err": r.local_logits_err, "failures": r.update_failures, "error": r.error}
    with out.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(prec, r.ok, row["figure"], {k: round(v, 4) for k, v in r.consistency.items()}, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())

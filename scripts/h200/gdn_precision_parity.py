"""Full-size GPU parity of the engine with the GDN chunk dots at each precision (tf32x3, the default, then tf32).

Writes ``<out>/gdn_precision.jsonl``: one line per precision with the run-level figures (consistency per mode,
its thresholds, the worst layer-local update and lm_head as fractions of their thresholds) of
``harness.parity.run_parity`` on the prompt lengths given (default the mutation suite's short set), both engines
sharing one bf16 reference (``metainfer.mutants.runner.ParityJudge``). The checkpoint must exist (``--ckpt``).

``source scripts/h200/env.sh && python3 scripts/h200/gdn_precision_parity.py --ckpt /tmp/ck --out $OUT``
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from harness.prompts import SeedDrawn
from metainfer.mutants.runner import ParityJudge, _figure
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
    p.add_argument("--lengths", default="65,2049,3000-4000", help="comma list; a-b: drawn from the seed in [a, b]")
    args = p.parse_args()
    lengths = tuple(SeedDrawn(*map(int, x.split("-"))) if "-" in x else int(x) for x in args.lengths.split(","))
    judge = ParityJudge(Path(args.ckpt), device=args.device, seed=args.seed, lengths=lengths, steps=32)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = Path(args.out) / "gdn_precision.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        base = render_engine(make_target(args.model, "nvfp4", "h200"), Path(tmp) / "r", force=True)
        try:
            for prec in args.precisions.split(","):
                eng = Path(tmp) / prec / base.name
                shutil.copytree(base, eng)
                op = eng / "engine" / "ops" / "gdn_chunk.py"
                text = op.read_text()
                assert text.count(DEFAULT) == 1, "the template's default dot precision line changed"
                op.write_text(text.replace(DEFAULT, DEFAULT.replace('"tf32")', f'"{prec}")')))
                t0 = time.perf_counter()
                r = judge(eng)
                row = {"precision": prec, "ok": r.ok, "seconds": time.perf_counter() - t0, "figure": _figure(r),
                       "consistency": r.consistency, "consistency_tolerances": r.consistency_tolerances,
                       "local_update_errors": r.local_update_errors, "local_update_tolerances": r.local_update_tolerances,
                       "local_logits_err": r.local_logits_err, "failures": r.update_failures, "error": r.error}
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(prec, r.ok, row["figure"], {k: round(v, 4) for k, v in r.consistency.items()}, flush=True)
        finally:
            judge.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How often the judge refuses an honest engine: parity-only gates of the tiny CPU engine over many prompt draws.

For each nonce, one ``python -m harness.gate --stages parity`` of the rendered tiny engine (optionally edited by a
module with ``apply(engine_dir)``, e.g. ``scripts/probes/batch_tiled_linear.py``) against itself: the CPU parity
set (12 prompts, the wide batch, the serving script). ``--bench`` adds a one-round bench of ``--workloads``, whose
prompt lengths then join the parity set as in ``metainfer build`` (17 prompts with ``ttft``; 20-40 s more per gate).
Then one line per gate (verdict, the run's batch noise and path noise, the largest greedy-self ratio, the serving
script's equal-batch figure, the first failure) and the counts. A refusal of an honest engine is a false reject.

    python scripts/honest_sweep.py --edit scripts/probes/batch_tiled_linear.py --nonces 101-127 --jobs 2
    python scripts/honest_sweep.py --nonces 1-40 --jobs 2 --out /tmp/sweep      # the template as rendered

CPU only. Each gate takes 30-50 s on one core (its worker runs one thread).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _edit(engine: Path, module: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))  # edits import the helpers of tests/cheats
    spec = importlib.util.spec_from_file_location("sweep_edit", module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.apply(engine)


def _gate(engine: Path, ckpt: Path, nonce: int, workloads: str, bench: bool, out: Path) -> str:
    js = out / f"gate-{nonce}.json"
    js.unlink(missing_ok=True)  # a gate that dies before writing must not report a reused folder's old verdict
    stages = ["--stages", "parity,bench", "--rounds", "1"] if bench else ["--stages", "parity"]
    argv = [sys.executable, "-m", "harness.gate", "--engine", str(engine), "--baseline", str(engine), "--checkpoint",
            str(ckpt), "--gpu", "cpu", *stages, "--seed", str(nonce), "--prompt-nonce", str(nonce * 7919 + 13),
            "--workloads", workloads, "--json", str(js)]
    run = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True)
    try:
        p = json.loads(js.read_text())["parity"]
        if not isinstance(p, dict):
            raise TypeError("no parity block")
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{nonce} NO RESULT ({err}): {run.stderr.strip()[-300:]}"
    if p.get("error"):
        return f"{nonce} ERROR {p['verdict']}: {p['error'][:300]}"
    greedy = max((float(q.get("greedy_self") or 0.0) for q in p.get("prompts") or []), default=0.0)  # "inf" parses
    fails = [f for q in p.get("prompts") or [] for f in q["failures"]] + list(p.get("update_failures") or [])
    eq = (p.get("serving") or {}).get("equal_batch")
    return (f"{nonce} {'ok' if p['ok'] else 'REFUSED'} batch_noise {p.get('batch_noise')} path_noise {p.get('path_noise')} "
            f"greedy_self {greedy:.3f} equal_batch {eq}" + (f" | {fails[0][:200]}" if fails else ""))


def main(argv: list[str] | None = None) -> int:
    from metainfer.attempts.setup import cached_checkpoint, render_tiny

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edit", type=Path, help="a module with apply(engine_dir) to edit the rendered engine first")
    ap.add_argument("--nonces", default="1-10", help="'A-B' inclusive: each is the gate's --seed and draws its nonce")
    ap.add_argument("--workloads", default="ttft", help="with --bench: the workloads timed, whose prompt lengths join the parity set")
    ap.add_argument("--bench", action="store_true", help="run a one-round bench after parity, as metainfer build's gate does")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, help="keep each gate's JSON here (default: a temporary folder)")
    a = ap.parse_args(argv)
    lo, _, hi = a.nonces.partition("-")
    with tempfile.TemporaryDirectory(prefix="metainfer-sweep-") as tmp:
        engine = render_tiny(Path(tmp), "bf16")
        if a.edit:
            _edit(engine, a.edit.resolve())
        out = (a.out or Path(tmp)).resolve()  # the gates run from the repository root
        out.mkdir(parents=True, exist_ok=True)
        ckpt = cached_checkpoint(ROOT, "bf16")
        nonces = range(int(lo), int(hi or lo) + 1)
        refused = broken = 0
        with ThreadPoolExecutor(max(1, a.jobs)) as pool:
            for line in pool.map(lambda n: _gate(engine, ckpt, n, a.workloads, a.bench, out), nonces):
                refused += " REFUSED " in line
                broken += " NO RESULT " in line or " ERROR " in line
                print(line, flush=True)
        print(f"{refused} of {len(nonces)} refused, {broken} without a verdict "
              f"({a.edit.name if a.edit else 'the template as rendered'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

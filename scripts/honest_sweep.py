"""How often the judge refuses an honest engine: parity-only gates of the tiny CPU engine over many prompt draws.

For each nonce, one ``python -m harness.gate --stages parity`` of the rendered tiny engine (optionally edited by a
module with ``apply(engine_dir)``, e.g. ``scripts/probes/batch_tiled_linear.py``) against itself, with the workloads'
prompt lengths added to the parity set as ``metainfer build`` does; then one line per gate (verdict, the run's batch
noise and path noise, the largest greedy-self ratio, the serving script's equal-batch figure, the first failure) and
the count refused. A refusal of an honest engine is a false reject.

    OMP_NUM_THREADS=1 python scripts/honest_sweep.py --edit scripts/probes/batch_tiled_linear.py --nonces 101-130
    python scripts/honest_sweep.py --nonces 1-40 --jobs 2 --out /tmp/sweep      # the template as rendered

CPU only. Each gate takes 30-50 s on one core.
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


def _gate(engine: Path, ckpt: Path, nonce: int, workloads: str, out: Path) -> str:
    js = out / f"gate-{nonce}.json"
    argv = [sys.executable, "-m", "harness.gate", "--engine", str(engine), "--baseline", str(engine), "--checkpoint",
            str(ckpt), "--gpu", "cpu", "--stages", "parity", "--seed", str(nonce), "--prompt-nonce", str(nonce * 7919 + 13),
            "--workloads", workloads, "--json", str(js)]
    subprocess.run(argv, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True)
    try:
        p = json.loads(js.read_text())["parity"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"{nonce} no result: {err}"
    greedy = max((q.get("greedy_self") or 0.0) for q in p["prompts"])
    fails = [f for q in p["prompts"] for f in q["failures"]] + list(p["update_failures"])
    eq = (p.get("serving") or {}).get("equal_batch")
    return (f"{nonce} {'ok' if p['ok'] else 'REFUSED'} batch_noise {p.get('batch_noise')} path_noise {p['path_noise']} "
            f"greedy_self {greedy:.3f} equal_batch {eq}" + (f" | {fails[0][:200]}" if fails else ""))


def main(argv: list[str] | None = None) -> int:
    from metainfer.attempts.setup import cached_checkpoint, render_tiny

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edit", type=Path, help="a module with apply(engine_dir) to edit the rendered engine first")
    ap.add_argument("--nonces", default="1-10", help="'A-B' inclusive: each is the gate's --seed and draws its nonce")
    ap.add_argument("--workloads", default="ttft", help="the bench workloads whose prompt lengths join the parity set")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, help="keep each gate's JSON here (default: a temporary folder)")
    a = ap.parse_args(argv)
    lo, _, hi = a.nonces.partition("-")
    with tempfile.TemporaryDirectory(prefix="metainfer-sweep-") as tmp:
        engine = render_tiny(Path(tmp), "bf16")
        if a.edit:
            _edit(engine, a.edit.resolve())
        out = a.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        ckpt = cached_checkpoint(ROOT, "bf16")
        nonces = range(int(lo), int(hi or lo) + 1)
        refused = 0
        with ThreadPoolExecutor(max(1, a.jobs)) as pool:
            for line in pool.map(lambda n: _gate(engine, ckpt, n, a.workloads, out), nonces):
                refused += " REFUSED " in line
                print(line, flush=True)
        print(f"{refused} of {len(nonces)} refused ({a.edit.name if a.edit else 'the template as rendered'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

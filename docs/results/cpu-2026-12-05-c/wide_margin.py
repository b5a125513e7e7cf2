"""Each wide-batch consistency figure over its threshold, the honest tiny engine against the cuts that only the wide
batch sees, under the CPU gate's parity (its lengths, its capacity: 64 slots), several prompt nonces.

    OMP_NUM_THREADS=1 python docs/results/cpu-2026-12-05-c/wide_margin.py nvfp4 1 6 honest rt_wide_lockstep_kv_fp8
"""
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from harness.gate import parse_args  # noqa: E402
from harness.gate_stages import gate_capacity, parity_lengths  # noqa: E402
from harness.parity import run_parity  # noqa: E402
from metainfer.attempts.setup import cached_checkpoint, render_tiny  # noqa: E402
from metainfer.attempts.spec import discover  # noqa: E402

quant, lo, hi, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
with tempfile.TemporaryDirectory() as tmp:
    base = render_tiny(Path(tmp), quant)
    ckpt = cached_checkpoint(ROOT, quant)
    engines = {}
    for name in names:
        if name == "honest":
            engines[name] = base
            continue
        (a,) = discover(ROOT, [name])
        d = Path(tmp) / name
        shutil.copytree(base, d)
        a.apply(d)
        engines[name] = d
    for nonce in range(lo, hi + 1):
        for name, eng in engines.items():
            g = parse_args(["--engine", str(eng), "--checkpoint", str(ckpt), "--gpu", "cpu", "--json", "/dev/null",
                            "--seed", str(nonce)])
            r = run_parity(eng, ckpt, seed=nonce, lengths=parity_lengths(g), prompt_nonce=nonce,
                           load_capacity=gate_capacity(g), serving="off")
            figs = {k: f"{v:.4f}/{r.consistency_tolerances[k]:.4f}" for k, v in r.consistency.items() if "wide" in k
                    or k == "decode batched"}
            print(nonce, f"{name:28s}", r.verdict, figs, (r.update_failures or [""])[0][:90], flush=True)

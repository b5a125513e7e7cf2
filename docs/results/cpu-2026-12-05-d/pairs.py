"""Dump per-pair consistency row squares of parity runs (honest or a cheat) over nonces, as JSONL."""
import argparse, json, sys, tempfile, shutil, importlib
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]; sys.path.insert(0, str(ROOT))
import harness.consistency as hc
import harness.parity_checks as pc
CALLS = []
_opbs = hc.pooled_by_source
def pbs(err2, ref2, sources, **kw):
    import inspect
    # the engine's figures (consistency_figures since 52a182c, run_checks before), not HF's own (reference_consistency)
    if inspect.stack()[1].function in ("consistency_figures", "run_checks"):
        CALLS.append([(e.tolist(), r.tolist()) for e, r in zip(err2, ref2)])
    return _opbs(err2, ref2, sources, **kw)
hc.pooled_by_source = pbs
SRC = {}
_orig_rc = pc.run_checks
def rc(hidden, runs, steps, tol, refs=None):
    SRC.clear()
    for mode, seqs in runs.items():
        SRC[mode] = [src for p, e, src in seqs if e.shape == p.shape]
    return _orig_rc(hidden, runs, steps, tol, refs)
pc.run_checks = rc
from harness.parity import run_parity
sys.path.insert(0, str(ROOT / "scripts"))
from parity_net_sweep import gate_parity
from metainfer.attempts.setup import cached_checkpoint, render_tiny
ap = argparse.ArgumentParser()
ap.add_argument("--quant", default="bf16"); ap.add_argument("--cheat", default="")
ap.add_argument("--nonces", default="1-5"); ap.add_argument("--gate", action="store_true"); ap.add_argument("--out", type=Path); ap.add_argument("--tunable", default="")
a = ap.parse_args()
lo, _, hi = a.nonces.partition("-")
with tempfile.TemporaryDirectory() as tmp:
    engine = render_tiny(Path(tmp), a.quant)
    if a.cheat:
        mod = importlib.import_module(f"tests.cheats.{a.cheat}"); mod.apply(engine)
    if a.tunable:
        k, v = a.tunable.split("="); tj = engine / "engine" / "tunables.json"; d = json.loads(tj.read_text())
        d["values"][k] = int(v); tj.write_text(json.dumps(d, indent=2))
    ckpt = cached_checkpoint(ROOT, a.quant)
    for nonce in range(int(lo), int(hi or lo) + 1):
        CALLS.clear()
        if a.gate:
            res = gate_parity(engine, ckpt, nonce)
        else:
            res = run_parity(engine, ckpt, seed=11, prompt_nonce=nonce)
        modes = list(res.consistency)
        rec = {"nonce": nonce, "ok": res.ok, "cons": res.consistency, "tols": res.consistency_tolerances,
               "failures": res.update_failures if hasattr(res, "update_failures") else None,
               "modes": {m: c for m, c in zip(modes, CALLS)}, "sources": dict(SRC)}
        with open(a.out, "a") as f: f.write(json.dumps(rec) + "\n")
        print(nonce, res.ok, {k: round(v, 5) for k, v in res.consistency.items()}, flush=True)

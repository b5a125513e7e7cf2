"""Sweep the honest engine's quick-gate consistency figures on tests/test_upgrade.py's changed-facts sibling.

The sibling (qwen3.6-tiny with 32 experts top-8, full attention every 2nd layer, 8 heads, I=96) is built as the test
builds it; its bf16 engine is rendered and judged against itself with the gate's quick parity (the upgrade test's
``--parity-lengths 3,9 --parity-steps 1`` plus the ``ttft`` bench lengths, as ``harness.gate_stages.parity_lengths``
adds them), one line of JSON per prompt nonce.

    python docs/results/cpu-2026-12-05-g/sibling_sweep.py --nonces 1-12 --out sweep.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from argparse import Namespace
from pathlib import Path


SIBLING = dict(num_experts=32, num_experts_per_tok=8, num_attention_heads=8, moe_intermediate_size=96, full_attention_interval=2)


def sibling(folder: Path, model: str = "qwen3.6-35b-a3b-tiny", only: tuple[str, ...] = (), **overrides) -> Path:
    """The test's sibling config; ``only``: change just these of its facts (to find which one moves a figure)."""
    from metainfer.targets import get_model

    cfg = copy.deepcopy(get_model(model).config)
    t = cfg["text_config"]
    t.update({k: v for k, v in {**SIBLING, **overrides}.items()
              if not only or k in only or (k == "num_experts_per_tok" and "num_experts" in only)})
    every = t["full_attention_interval"]
    t["layer_types"] = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(t["num_hidden_layers"])]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder / "config.json"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nonces", default="1-12")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--reference-dtype", default=None, help="bfloat16: HF's own figures in bf16 (hf_own), the model's amplification")
    ap.add_argument("--only", default="", help="comma list of the sibling's facts to change (default: all)")
    ap.add_argument("--interval", type=int, default=0, help="with --only full_attention_interval: this interval instead of 2")
    ap.add_argument("--registered", action="store_true", help="the registered tiny model itself, not the sibling")
    a = ap.parse_args()
    lo, hi = map(int, a.nonces.split("-"))
    from harness.gate import GATE_LENGTH_JITTER
    from harness.gate_stages import gate_capacity, parity_lengths
    from harness.parity import run_parity
    from metainfer.checkpoint import write_checkpoint
    from metainfer.render import render_engine
    from metainfer.targets import get_quant, make_target

    tmp = Path(tempfile.mkdtemp(prefix="sib-"))
    target = make_target("qwen3.6-35b-a3b-tiny" if a.registered else str(sibling(tmp / "qwen3.6-sibling", only=tuple(x for x in a.only.split(",") if x),
                                  **({"full_attention_interval": a.interval} if a.interval else {}))), "bf16", "cpu")
    engine = render_engine(target, tmp / "engine")
    ck = write_checkpoint(target.model, get_quant("bf16"), tmp / "ck", 1234, progress=False)
    gate = Namespace(parity_lengths=(3, 9), device="cpu", stages=("static", "parity", "bench"), workloads=("ttft",),
                     scale="cpu", length_jitter=GATE_LENGTH_JITTER,
                     parity_steps=1, seed=a.seed)
    lengths = parity_lengths(gate)
    cap = gate_capacity(gate)  # the load capacity every engine worker of that gate gets: its slots set the wide batch
    for nonce in range(lo, hi + 1):
        t0 = time.perf_counter()
        r = run_parity(engine, ck, seed=a.seed, device="cpu", prompt_nonce=nonce, lengths=lengths, steps=1, serving="quick",
                       reference_dtype=a.reference_dtype,
                       load_capacity=cap)
        rec = {"nonce": nonce, "ok": r.ok, "lengths": [repr(n) for n in lengths], "consistency": r.consistency,
               "thresholds": r.consistency_tolerances, "hf_own": r.reference_consistency, "failures": r.update_failures, "s": round(time.perf_counter() - t0, 1)}
        with a.out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()

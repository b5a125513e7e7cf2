"""Time the full-size HF reference (bf16 on the GPU) per operation the parity stage asks of it: load, a full
forward (logits), the hidden-state forward, layer-local outputs, and ``run`` (cached greedy draft + checking
forward) per prompt length. Prints one line per figure and writes them as JSON lines to ``$OUT/ref_timing.jsonl``.

    python3 scripts/h200/reference_timing.py CHECKPOINT [--lengths 65,2049,4000] [--steps 32] [--tag torch]

Whether HF runs flash-linear-attention's GDN kernels or its torch fallback is printed (``fla``), so two runs
with and without the wheel on the path compare the two.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--lengths", default="65,2049,4000")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    from transformers.utils.import_utils import is_flash_linear_attention_available

    from harness.layer_local import local_outputs
    from harness.reference import Reference

    out = open(os.path.join(os.environ.get("OUT", "/tmp"), "ref_timing.jsonl"), "a")

    def emit(what: str, length: int, seconds: float) -> None:
        rec = {"tag": a.tag, "fla": is_flash_linear_attention_available(), "what": what, "length": length, "s": round(seconds, 3)}
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")
        out.flush()

    ref, s = timed(lambda: Reference.from_checkpoint(a.checkpoint, device="cuda", dtype=torch.bfloat16))
    emit("load", 0, s)
    g = torch.Generator().manual_seed(1)
    for n in [int(x) for x in a.lengths.split(",")]:
        toks = torch.randint(0, ref.vocab_size, (n,), generator=g).tolist()
        rows = sorted(set([0, n - 1] + list(range(0, n, max(1, n // 64)))))
        timed(lambda: ref.logits(toks[:8]))  # warm-up of any lazy kernel
        _, s = timed(lambda: ref.logits(toks, rows))
        emit("logits", n, s)
        h, s = timed(lambda: ref.hidden_states(toks))
        emit("hidden_states", n, s)
        _, s = timed(lambda: local_outputs(ref, toks, h, rows))
        emit("local_outputs", n, s)
        del h
        _, s = timed(lambda: ref.run(toks, a.steps, rows))
        emit(f"run_{a.steps}", n, s)
    print("peak GiB", round(torch.cuda.max_memory_allocated() / 2**30, 1), flush=True)


if __name__ == "__main__":
    main()

"""Where the full-size HF reference's load goes (bf16 on the GPU, in this process, one intra-op thread as the
gate's workers run): the checkpoint's validation, building the model on the device (HF's init included), then per
decoder layer the read of its routed experts from the safetensors shards (host) and their NVFP4 dequantisation on
the device, and the rest of the tensors. Prints one JSON line per phase (flushed, so a call that ends at its limit
keeps what was measured) and writes them to ``$OUT/ref_load.jsonl``.

    python3 scripts/h200/reference_load_timing.py CHECKPOINT [--layers N] [--threads 1] [--device cuda]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--layers", type=int, default=0, help="time only the first N decoder layers' experts (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from harness.reference import _build_model
    from metainfer.checkpoint import CheckpointReader

    out = open(os.path.join(os.environ.get("OUT", "/tmp"), "ref_load.jsonl"), "a")
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def emit(what: str, seconds: float, **extra) -> None:
        rec = {"what": what, "s": round(seconds, 3), "gpu_gb": round(torch.cuda.memory_allocated() / 1e9, 1) if dev.type == "cuda" else None, **extra}
        print(json.dumps(rec), flush=True)
        out.write(json.dumps(rec) + "\n")
        out.flush()

    t = time.perf_counter()
    reader = CheckpointReader(Path(a.checkpoint))
    reader.validate()
    emit("validate", time.perf_counter() - t)
    t = time.perf_counter()
    model = _build_model(reader.text_config, torch.bfloat16, dev)
    sync()
    emit("build_model", time.perf_counter() - t, params_b=round(sum(p.numel() for p in model.parameters()) / 1e9, 2))
    del model
    n = reader.text_config["num_hidden_layers"] if a.layers <= 0 else a.layers
    read_s = deq_s = 0.0
    for layer in range(n):
        t0 = time.perf_counter()
        ex = reader.get_experts(layer)
        t1 = time.perf_counter()
        gate_up, down = ex.fused_dense(torch.bfloat16, dev)
        sync()
        t2 = time.perf_counter()
        del gate_up, down, ex
        read_s += t1 - t0
        deq_s += t2 - t1
        emit("experts", t2 - t0, layer=layer, read_s=round(t1 - t0, 3), dequant_s=round(t2 - t1, 3))
    emit("experts_total", read_s + deq_s, layers=n, read_s=round(read_s, 1), dequant_s=round(deq_s, 1))


if __name__ == "__main__":
    main()

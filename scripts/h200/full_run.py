"""The full-size target on the H200, in one process per step so each step's figures survive the next's failure.

Steps (``--steps``, comma list, in this order):
- ``checkpoint``: write the synthetic full-size NVFP4 checkpoint of qwen3.6-35b-a3b (seeded)
  into ``--ckpt`` unless a complete one is there already.
- ``render``: render the h200 engine into ``--gen`` and set the GPU tunables (CUDA graphs up to
  ``--graph-batch`` sequences, split-K decode attention).
- ``parity``: the engine against HF ``Qwen3_5MoeForCausalLM`` in bf16 on the same GPU.
- ``profile``: a per-kernel profile of one batch-1 decode step (eager, CUPTI), with the bytes
  each weight-reading op moves, and the graph-replayed step time.
- ``bench``: the three DESIGN.md workloads on our engine (median, spread, roofline fraction).
- ``kbench``: the engine's kernel timings at the real shapes (``kernels.bench --graph``, T = 1, 8, 32).
- ``crosscheck``: our greedy tokens on the prompts vLLM answered in ``--vllm-json`` (same
  checkpoint seed), token by token; a disagreement is reported, not raised.

Every step writes ``<out>/<step>.json`` and prints one summary line. Usage (device machine):
``python3 scripts/h200/full_run.py --steps checkpoint,render,parity,profile --out $OUT``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

MODEL, QUANT, GPU = "qwen3.6-35b-a3b", "nvfp4", "h200"


def _target(args) -> str:
    return f"{args.model}-{QUANT}-{args.gpu}"


def _commit() -> str:
    """The source commit: ``.device_commit`` (written before a device call, whose copy has no .git), else git."""
    marker = Path(".device_commit")
    if marker.is_file():
        return marker.read_text().strip()
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no .git on the device copy)"


def step_checkpoint(args) -> dict:
    from metainfer.checkpoint import write_checkpoint
    from metainfer.targets import get_model, get_quant

    ckpt = Path(args.ckpt)
    if (ckpt / "config.json").is_file() and (ckpt / "model.safetensors.index.json").is_file():
        return {"skipped": "complete checkpoint present", "path": str(ckpt)}
    t = time.perf_counter()
    write_checkpoint(get_model(args.model), get_quant(QUANT), ckpt, args.seed, force=True, progress=False)
    size = sum(f.stat().st_size for f in ckpt.glob("*.safetensors"))
    return {"seconds": time.perf_counter() - t, "bytes": size, "seed": args.seed, "path": str(ckpt)}


def step_render(args) -> dict:
    from metainfer.render import render_engine
    from metainfer.targets import make_target

    out = render_engine(make_target(args.model, QUANT, args.gpu), args.gen, force=True)
    path = out / "engine" / "tunables.json"
    data = json.loads(path.read_text())
    data["values"].update(cuda_graph_max_batch=args.graph_batch, attention_decode_splits=args.splits)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return {"engine": str(out), "tunables": data["values"]}


def step_parity(args) -> dict:
    from harness.parity import run_parity

    res = run_parity(Path(args.gen) / _target(args), args.ckpt, seed=args.seed, device=args.device, reference_dtype=args.reference_dtype)
    return res.to_json()


def step_bench(args) -> dict:
    from harness.bench import BenchConfig, bench_single
    from harness.workloads import CPU_SHAPES, FULL_SHAPES
    from metainfer.targets import get_gpu

    cfg = BenchConfig(workloads=["ttft", "decode-bs1", "conc32"], rounds=args.rounds, seed=args.seed,
                      shapes=FULL_SHAPES if args.device == "cuda" else CPU_SHAPES, device=args.device, gpu=get_gpu(args.gpu))
    return bench_single(Path(args.gen) / _target(args), args.ckpt, cfg)


def step_profile(args) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from profile_decode import profile_decode

    return profile_decode(Path(args.gen) / _target(args), args.ckpt, Path(args.out), device=args.device)


def step_kbench(args) -> dict:
    engine = Path(args.gen) / _target(args)
    cmd = [sys.executable, "-m", "engine.kernels.bench", "--graph", "--sweep", "--tokens", "1", "8", "32"]
    run = subprocess.run(cmd, cwd=engine, capture_output=True, text=True, timeout=600)
    if run.returncode:
        raise RuntimeError(f"kernels.bench failed (rc {run.returncode}): {run.stderr[-2000:]}")
    (Path(args.out) / "kbench.txt").write_text(run.stdout)
    return {"lines": run.stdout.splitlines()}


def step_crosscheck(args) -> dict:
    from harness.engine_loader import import_engine

    greedy = json.loads(Path(args.vllm_json).read_text())["greedy"]
    mod = import_engine(Path(args.gen) / _target(args))
    eng = mod.load(args.ckpt, args.device, max_batch=len(greedy["prompts"]), max_seq_len=512)
    params = mod.SamplingParams(max_tokens=greedy["max_tokens"], temperature=0.0, ignore_eos=True)
    ours = eng.generate(greedy["prompts"], params)
    rows = []
    for o, v in zip(ours, greedy["tokens"]):
        first = next((i for i, (a, b) in enumerate(zip(o, v)) if a != b), None)
        rows.append({"ours": o, "vllm": v, "first_disagreement": first, "agree": sum(a == b for a, b in zip(o, v))})
    return {"vllm_json": str(args.vllm_json), "all_agree": all(r["first_disagreement"] is None for r in rows), "prompts": rows}


STEPS = {"checkpoint": step_checkpoint, "render": step_render, "parity": step_parity,
         "profile": step_profile, "bench": step_bench, "kbench": step_kbench, "crosscheck": step_crosscheck}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", default="checkpoint,render,parity,profile,bench")
    p.add_argument("--ckpt", default="/tmp/ckpt")
    p.add_argument("--gen", default="/tmp/gen")
    p.add_argument("--out", default="/tmp/out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--graph-batch", type=int, default=32)
    p.add_argument("--splits", type=int, default=16)
    p.add_argument("--model", default=MODEL, help="a -tiny twin for a dry run on the CPU")
    p.add_argument("--gpu", default=GPU)
    p.add_argument("--device", default="cuda")
    p.add_argument("--reference-dtype", default="bfloat16")
    p.add_argument("--vllm-json", default="docs/results/h200-2026-11-30/vllm.json", help="crosscheck: vLLM's result JSON")
    args = p.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.steps.split(","):
        t = time.perf_counter()
        try:
            result = {"ok": True, **STEPS[name](args)}
        except Exception as err:  # one step's failure must not lose the other steps' figures
            import traceback

            result = {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
            failed = True
        result |= {"step": name, "wall_s": time.perf_counter() - t, "commit": _commit()}
        (Path(args.out) / f"{name}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        brief = {k: v for k, v in result.items() if k not in ("traceback", "prompts", "kernels", "tunables")}
        print(f"[{name}] {json.dumps(brief, default=str)[:1500]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Paged KV on CUDA, the tiny target rendered for the H200: the same token script (interleaved chunked
prefills, a late third sequence, decode steps across block edges, a batched greedy generate) on the
static cache (kv_block_size 0) and on paged caches, with CUDA graphs on (cuda_graph_max_batch 8,
split-K decode) and off. Writes paged_kv_check.json under --out and prints a table.

Pass criterion for flipping the GPU default: every paged row has max_abs_diff 0 against static with
the same graph setting (the kernels read the same keys in the same tile order; only addresses
change), equal generate tokens, and the pool sized from free memory (``pool_blocks``) as expected.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch


def _render(root: Path, **values) -> Path:
    from metainfer.render import render_engine
    from metainfer.targets import Target, get_gpu, get_model, get_quant

    out = render_engine(Target(get_model("qwen3.6-35b-a3b-tiny"), get_quant("nvfp4"), get_gpu("h200")),
                        Path(tempfile.mkdtemp(dir=root)))
    path = out / "engine" / "tunables.json"
    data = json.loads(path.read_text())
    data["values"].update(values)
    path.write_text(json.dumps(data, indent=2))
    return out


def _prompt(n: int, seed: int) -> list[int]:
    return torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _script(mod, eng) -> tuple[list[torch.Tensor], list[list[int]]]:
    a, b, c = _prompt(300, 1), _prompt(170, 2), _prompt(5, 3)
    out = []
    r = eng.prefill([a[:100], b[:33]])
    sa, sb = r.slots
    out += r.logits
    r2 = eng.prefill([b[33:], a[100:]], [sb, sa])
    out += r2.logits
    rc = eng.prefill([c])
    out += rc.logits
    toks = [int(x[-1].argmax()) for x in (r2.logits[1], r2.logits[0], rc.logits[0])]
    for _ in range(40):
        lg = eng.decode([sa, sb, rc.slots[0]], toks)
        out.append(lg)
        toks = [int(x) for x in lg.argmax(-1)]
    eng.release([sa, sb, rc.slots[0]])
    gen = eng.generate([_prompt(n, 10 + n) for n in (7, 64, 129, 250)],
                       mod.SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
    return [x.float().cpu() for x in out], gen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of this script (graphs run their padded path eagerly)")
    ap.add_argument("--block-sizes", default="16,64,256")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from metainfer.checkpoint import write_checkpoint
    from harness.engine_loader import import_engine
    from metainfer.targets import get_model, get_quant

    root = Path(tempfile.mkdtemp())
    ckpt = write_checkpoint(get_model("qwen3.6-35b-a3b-tiny"), get_quant("nvfp4"), root / "ckpt", 0, progress=False)
    rows, base = [], {}
    for graphs in (8, 0):
        for bs in (0, *map(int, args.block_sizes.split(","))):
            mod = import_engine(_render(root, cuda_graph_max_batch=graphs, attention_decode_splits=4))
            eng = mod.load(ckpt, args.device, max_batch=8, max_seq_len=1024, kv_block_size=bs)
            logits, gen = _script(mod, eng)
            row = {"graphs": graphs, "kv_block_size": bs, "pool_blocks": eng.cache.kv.num_blocks,
                   "finite": all(bool(torch.isfinite(x).all()) for x in logits)}
            if bs == 0:
                base[graphs] = (logits, gen)
            ref_l, ref_g = base[graphs]
            row["max_abs_diff"] = max(float((x - y).abs().max()) for x, y in zip(logits, ref_l))
            row["generate_equal"] = gen == ref_g
            rows.append(row)
            print(row, flush=True)
            del eng
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    ok = all(r["finite"] and r["max_abs_diff"] == 0 and r["generate_equal"] for r in rows)
    (args.out / "paged_kv_check.json").write_text(json.dumps({"rows": rows, "ok": ok}, indent=2))
    print(f"{'graphs':>6} {'block':>5} {'pool_blocks':>11} {'max_abs_diff':>12} {'gen_equal':>9}")
    for r in rows:
        print(f"{r['graphs']:>6} {r['kv_block_size']:>5} {r['pool_blocks']:>11} {r['max_abs_diff']:>12.3g} {str(r['generate_equal']):>9}")
    print("PAGED KV CHECK", "OK" if ok else "FAILED")


if __name__ == "__main__":
    main()

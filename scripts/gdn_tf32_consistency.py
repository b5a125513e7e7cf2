"""Does tf32 in the GDN chunked prefill explain the H200's parity consistency? A CPU experiment (about 3 min).

On the H200 the template engine's decode rows sit 0.0245-0.0259 from its own prefill (consistency, docs/PARITY.md "On
the H200"), 2.07x the CPU threshold, while its prompt rows sit at 0.0004-0.0007. ``ops/gdn_chunk.py`` runs its
dots at ``input_precision="tf32"`` on GPUs (10-bit mantissa operands). This renders the tiny NVFP4 engine for the
h200, makes a copy whose CPU chunked-prefill reference rounds the operands of the same dots to tf32 (round to
nearest, as the tensor cores read them), and runs the full CPU parity set on both against one fp32 reference.

    python scripts/gdn_tf32_consistency.py [--workdir /tmp/gdn-tf32]

Prints each engine's verdict, consistency figures and worst layer-local update.
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

TF32 = '''def _t(x):
    """fp32 -> tf32 (10-bit mantissa, round to nearest), as a tensor core reads a tf32 dot's operands."""
    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)


def _chunk_one('''

#: the dots ops/gdn_chunk.py runs at PREC (tf32 on GPUs), in kernels/reference_prefill.py's _chunk_one
EDITS = [
    ("ut = (k_beta @ k.transpose(-1, -2)) * decay", "ut = (_t(k_beta) @ _t(k.transpose(-1, -2))) * decay"),
    ("attn = (q @ k.transpose(-1, -2)) * decay", "attn = (_t(q) @ _t(k.transpose(-1, -2))) * decay"),
    ("v_new = new_v[:, c] - k_cum[:, c] @ s", "v_new = new_v[:, c] - _t(k_cum[:, c]) @ _t(s)"),
    ("o[:, c] = q_dec[:, c] @ s + attn[:, c] @ v_new", "o[:, c] = _t(q_dec[:, c]) @ _t(s) + _t(attn[:, c]) @ _t(v_new)"),
    ("+ k_dec[:, c].transpose(-1, -2) @ v_new", "+ _t(k_dec[:, c].transpose(-1, -2)) @ _t(v_new)"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/gdn-tf32"))
    a = ap.parse_args()
    from harness.parity import run_parity
    from harness.reference_cache import ReferenceCache
    from metainfer.checkpoint import write_checkpoint
    from metainfer.render import render_engine
    from metainfer.targets import get_model, get_quant, make_target

    w = a.workdir
    shutil.rmtree(w, ignore_errors=True)
    ck = write_checkpoint(get_model("qwen3.6-35b-a3b-tiny"), get_quant("nvfp4"), w / "ck", 1234, progress=False)
    fp32 = render_engine(make_target("qwen3.6-35b-a3b-tiny", "nvfp4", "h200"), w / "fp32", force=True)
    tf32 = w / "tf32" / fp32.name
    shutil.copytree(fp32, tf32)
    src = tf32 / "engine" / "kernels" / "reference_prefill.py"
    text = src.read_text().replace("def _chunk_one(", TF32, 1)
    for old, new in EDITS:
        if text.count(old) != 1:
            raise SystemExit(f"{src}: expected one {old!r}; the template changed, update EDITS")
        text = text.replace(old, new)
    src.write_text(text)
    for name, engine in (("fp32 dots (CPU engine)", fp32), ("tf32 dots (as ops/gdn_chunk.py on a GPU)", tf32)):
        with ReferenceCache(ck, device="cpu", dtype="float32", nonce=1) as ref:
            r = run_parity(engine, ck, seed=1, device="cpu", reference=ref)
        print(f"{name}: {'pass' if r.ok else 'FAIL'}; consistency "
              + ", ".join(f"{k} {v:.4f}" for k, v in r.consistency.items())
              + f"; worst layer-local update {max(r.local_update_errors or [float('nan')]):.4f}", flush=True)


if __name__ == "__main__":
    main()

"""The anchor of the run-level parity figures: HF's own bfloat16 run measured with them (docs/PARITY.md, "Layer-local
parity").

``python -m harness.anchor_local --checkpoint DIR --seeds 1,2,...`` prints one JSON line per prompt seed (the
CPU parity lengths, each prompt followed by ``steps`` seeded random tokens) with the figures a bfloat16 engine is
held to, HF-bf16 in the engine's place, the float32 HF model as the reference:

- ``local_update``: per layer, HF-bf16's update ``h[l+1] − h[l]`` against fp32 layer l run on HF-bf16's ``h[l]``,
  pooled over every token but the worst ``drop`` (``parity_local_metrics.local_update_errors``);
- ``local_logits``: HF-bf16's logits against the fp32 final norm + ``lm_head`` on its ``h[L]``;
- ``consistency``: HF-bf16's cached decode logits (its recurrent GDN step and KV cache) against its own
  uncached forward of the same tokens (chunked GDN), pooled over the decode rows but the worst ``decode_drop``.

A last line ``{"summary": ...}`` gives the worst seed per figure. It uses no tolerance.
"""

from __future__ import annotations

import argparse
import json

import torch

from harness.layer_local import local_outputs
from harness.parity_local_metrics import local_update_errors, storage_ratios
from harness.parity_metrics import pooled_rows_error
from harness.prompts import CPU_LENGTHS, DECODE_STEPS, make_prompts
from harness.reference import Reference
from harness.tolerances import BF16_U


@torch.no_grad()
def cached_decode_logits(ref: Reference, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """HF's cached decode: a forward over ``prompt`` with its cache, then one step per token of ``tokens``;
    the logits of those steps, float32 [len(tokens), V] on CPU (row j: after ``tokens[j]``)."""
    kw = "cache" if "cache" in ref.model.forward.__code__.co_varnames else "past_key_values"
    out = ref.model(input_ids=ref._ids(prompt), use_cache=True)
    rows = []
    for t in tokens:
        cache = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")
        if cache is None:
            raise RuntimeError("the HF model returned no cache for use_cache=True; transformers' cache API changed")
        out = ref.model(input_ids=ref._ids([t]), use_cache=True, **{kw: cache})
        rows.append(out.logits[0, -1].float().cpu())
    return torch.stack(rows)


def measure_seed(r32: Reference, r16: Reference, seed: int, *, steps: int = DECODE_STEPS, drop: float,
                 decode_drop: float, min_drop: int = 0) -> dict:
    """HF-bf16's run-level figures for prompt seed ``seed`` (module docstring); floats, relative L2."""
    prompts = make_prompts(seed, r32.vocab_size, CPU_LENGTHS)
    g = torch.Generator().manual_seed(seed + 7)
    hidden, local, logits, local_logits, dec, pre = [], [], [], [], [], []
    conts = [torch.randint(0, r32.vocab_size, (steps,), generator=g).tolist() for _ in prompts]
    for p, cont in zip(prompts, conts, strict=True):
        tokens = p.tokens + cont
        h = r16.hidden_states(tokens)
        lg = r16.logits(tokens)
        loc = local_outputs(r32, tokens, h)
        hidden.append(h), local.append(loc["outputs"]), logits.append(lg), local_logits.append(loc["logits"])
        n = len(p.tokens)
        dec.append(cached_decode_logits(r16, p.tokens, cont))
        pre.append(lg[n:])
    ratios = storage_ratios([r32.hidden_states(p.tokens + c) for p, c in zip(prompts, conts, strict=True)])
    upd = local_update_errors(hidden, local, drop=drop, min_drop=min_drop)
    floor = [BF16_U / 3**0.5 * x for x in ratios]
    return {"seed": seed, "local_update": upd, "storage_ratio": ratios,
            "local_noise": [max(0.0, e * e - f * f) ** 0.5 for e, f in zip(upd, floor, strict=True)],
            "local_logits": pooled_rows_error(logits, local_logits),
            "consistency": pooled_rows_error(dec, pre, drop=decode_drop, per_pair=True)}


def main() -> None:
    """Command line: one JSON line per seed, then the worst seed per figure."""
    from harness.tolerances import get_tolerance

    tol = get_tolerance("bfloat16", "float32")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--seeds", default="1,2,3,4,5,6,7,8,9,10")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    r32 = Reference.from_checkpoint(args.checkpoint, device=args.device, dtype=torch.float32)
    r16 = Reference.from_checkpoint(args.checkpoint, device=args.device, dtype=torch.bfloat16)
    rows = []
    for s in (int(x) for x in args.seeds.split(",")):
        rows.append(measure_seed(r32, r16, s, drop=tol.local_drop, decode_drop=tol.consistency_drop,
                                 min_drop=tol.local_min_drop))
        print(json.dumps(rows[-1]), flush=True)
    n = len(rows[0]["local_update"])
    print(json.dumps({"summary": {"seeds": len(rows),
                                  "local_update_max": [max(r["local_update"][l] for r in rows) for l in range(n)],
                                  "local_noise_max": max(max(r["local_noise"]) for r in rows),
                                  "local_logits_max": max(r["local_logits"] for r in rows),
                                  "consistency_max": max(r["consistency"] for r in rows)}}))


if __name__ == "__main__":
    main()

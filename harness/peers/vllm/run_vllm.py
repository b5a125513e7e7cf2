"""Run vLLM 0.25.1 on a checkpoint folder: the DESIGN.md workloads (``results.WORKLOADS``) and a greedy cross-check, as JSON.

On the H200 machine, after ``install.sh`` (``PYTHONPATH=/tmp/site``)::

    python3 harness/peers/vllm/run_vllm.py --checkpoint /tmp/ckpt --out $OUT/vllm.json

Settings from ``../shared/peers/vllm-0.25.1.md``: in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0),
VLLM_USE_FLASHINFER_SAMPLER=0, ``language_model_only=True`` (vision tower not built, so the
checkpoint needs no ``model.visual.*``; ``mtp.*`` is skipped by the loader),
``gdn_prefill_backend="triton"``, ``skip_tokenizer_init=True`` with token-id prompts,
``max_model_len=4096`` (16384 when a selected workload needs more: ttft-8k, prefill-16k). Prefix
caching is off by default so repeated prompts are prefilled in full, as in our engine. CUDA graphs and torch.compile stay at vLLM's defaults.

Measurements (wall clock around ``LLM.generate``, ``use_tqdm=False``; each repetition on a
fresh random prompt; one unmeasured warm-up per workload; greedy, ``ignore_eos``):
see ``results.WORKLOADS[...].method``. The JSON is rewritten after every step, so a run
cut short still leaves what was measured. ``--dry-run`` validates arguments, checkpoint
config and prompts and writes the skeleton without importing vLLM or torch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__:
    from .results import CONC, WORKLOADS, model_len_needed, new_result, random_prompts, read_greedy_prompts, summarize, token_high, write_result
else:  # run by path on the device: python3 harness/peers/vllm/run_vllm.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from results import CONC, WORKLOADS, model_len_needed, new_result, random_prompts, read_greedy_prompts, summarize, token_high, write_result


@dataclass(frozen=True)
class PeerSettings:
    """What the ``vllm.LLM`` is built with (recorded in the result's ``settings``)."""

    checkpoint: str
    gpu_memory_utilization: float = 0.8
    max_model_len: int = 4096
    enforce_eager: bool = False
    enable_prefix_caching: bool = False
    seed: int = 0
    language_model_only: bool = True
    gdn_prefill_backend: str = "triton"
    skip_tokenizer_init: bool = True
    dtype: str = "bfloat16"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; argparse exits with status 2 on a usage error."""
    ap = argparse.ArgumentParser(prog="run_vllm.py", description="vLLM 0.25.1 peer: the benchmark workloads and greedy tokens, as one JSON.")
    ap.add_argument("--checkpoint", type=Path, required=True, help="HF checkpoint folder (the one our engine loads)")
    ap.add_argument("--out", type=Path, required=True, help="result JSON path (rewritten after every step)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.8, help="vLLM's share of GPU memory (lower it when our engine holds the GPU too)")
    ap.add_argument("--max-model-len", type=int, default=None,
                    help="vLLM's max_model_len (default: 4096, or 16384 when a selected workload needs more: ttft-8k, prefill-16k)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompt draw (and vLLM's)")
    ap.add_argument("--reps", type=int, default=7, help="measured repetitions of the one-request workloads (ttft, ttft-2k, ttft-8k, prefill-16k)")
    ap.add_argument("--reps-long", type=int, default=3, help="measured repetitions of decode-bs1 and the conc workloads")
    ap.add_argument("--workloads", default="ttft,decode-bs1,conc32", help="comma-separated subset of " + ",".join(WORKLOADS))
    ap.add_argument("--greedy-prompts", type=Path, default=None,
                    help="JSON list of token-id lists (or {'prompts': [...], 'max_tokens': N}); default: 4 seeded prompts, 16 tokens")
    ap.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs / torch.compile (debugging only: not a fair figure)")
    ap.add_argument("--prefix-caching", action="store_true", help="turn vLLM's prefix caching on (off by default)")
    ap.add_argument("--dry-run", action="store_true", help="check inputs and write the JSON skeleton without importing vLLM")
    a = ap.parse_args(argv)
    bad = [w for w in a.workloads.split(",") if w not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s) {bad}; choose from {list(WORKLOADS)}")
    need = model_len_needed(a.workloads.split(","))
    if a.max_model_len is None:
        a.max_model_len = 4096 if need <= 4096 else 16384 * -(-need // 16384)
    elif a.max_model_len < need:
        ap.error(f"--max-model-len {a.max_model_len} is below the {need} tokens of the selected workloads; raise it or leave it out")
    if not 0.05 <= a.gpu_memory_utilization <= 0.98:
        ap.error(f"--gpu-memory-utilization {a.gpu_memory_utilization} outside 0.05..0.98")
    if a.reps < 1 or a.reps_long < 1:
        ap.error("--reps and --reps-long must be at least 1")
    return a


def read_config(checkpoint: Path) -> dict:
    """``checkpoint/config.json`` as a dict; raises FileNotFoundError naming the fix when absent."""
    path = checkpoint / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: --checkpoint must be an HF checkpoint folder "
                                "(write one with `python3 -m metainfer.cli checkpoint --model ... --quant nvfp4 --out DIR`)")
    return json.loads(path.read_text())


def probe_global_scales(checkpoint: Path, limit: int = 64) -> dict:
    """Compare ``weight_scale_2`` of gate_proj and up_proj for up to ``limit`` modules (ModelOpt NVFP4).

    vLLM 0.25.1 keeps one global scale per fused gate_up: the gate's for routed experts
    (``ModelOptNvFp4FusedMoE.process_weights_after_loading``: ``w13_weight_scale_2[:, 0]``) and the
    max for a fused linear such as the shared expert (``ModelOptNvFp4LinearMethod``). Real
    ModelOpt exports share that scale; a checkpoint where they differ is computed differently
    by vLLM, which shows in the greedy cross-check, not in the timings.
    Returns ``{"pairs_checked", "pairs_differing", "max_ratio"}``; zeros for a checkpoint
    without ``*.gate_proj.weight_scale_2`` (bf16, compressed-tensors).
    """
    from safetensors import safe_open

    index = checkpoint / "model.safetensors.index.json"
    names = json.loads(index.read_text())["weight_map"] if index.is_file() else {}
    if not names and (checkpoint / "model.safetensors").is_file():
        with safe_open(str(checkpoint / "model.safetensors"), "pt") as f:
            names = {k: "model.safetensors" for k in f.keys()}
    gates = sorted(k for k in names if k.endswith(".gate_proj.weight_scale_2"))[:limit]
    checked = differing = 0
    worst = 1.0
    for g in gates:
        u = g.replace(".gate_proj.", ".up_proj.")
        if u not in names:
            continue
        vals = []
        for k in (g, u):
            with safe_open(str(checkpoint / names[k]), "pt") as f:
                vals.append(float(f.get_tensor(k).float()))
        checked += 1
        ratio = max(vals) / min(vals) if min(vals) > 0 else float("inf")
        differing += ratio != 1.0
        worst = max(worst, ratio)
    return {"pairs_checked": checked, "pairs_differing": differing, "max_ratio": worst}


def build_llm(s: PeerSettings):
    """Construct ``vllm.LLM`` in-process with the settings that worked on the H200 (module docstring)."""
    from vllm import LLM

    return LLM(model=s.checkpoint, skip_tokenizer_init=s.skip_tokenizer_init, language_model_only=s.language_model_only,
               gdn_prefill_backend=s.gdn_prefill_backend, max_model_len=s.max_model_len, dtype=s.dtype,
               gpu_memory_utilization=s.gpu_memory_utilization, enforce_eager=s.enforce_eager,
               enable_prefix_caching=s.enable_prefix_caching, seed=s.seed)


def timed_generate(llm, prompts: list[list[int]], max_tokens: int) -> tuple[float, list[list[int]]]:
    """Wall seconds of one ``llm.generate`` (greedy, ignore_eos) and the output ids; raises RuntimeError on a short output."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0, detokenize=False)
    reqs = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    t0 = time.perf_counter()
    outs = llm.generate(reqs, sp, use_tqdm=False)
    dt = time.perf_counter() - t0
    toks = [list(o.outputs[0].token_ids) for o in outs]
    if any(len(t) != max_tokens for t in toks):
        raise RuntimeError(f"vLLM returned {[len(t) for t in toks]} tokens, expected {max_tokens} each with ignore_eos")
    return dt, toks


def measure(llm, name: str, prompts: list[list[list[int]]]) -> list[float]:
    """Samples of workload ``name``; ``prompts[k]`` is the batch of repetition k (k=0 is the unmeasured warm-up)."""
    w, samples = WORKLOADS[name], []
    for k, batch in enumerate(prompts):
        if w.timing == "ttft":
            dt, _ = timed_generate(llm, batch, 1)
            value = dt * 1e3
        elif w.timing == "prefill":
            dt, _ = timed_generate(llm, batch, 1)
            value = len(batch[0]) / dt
        elif w.timing == "decode":
            t1, _ = timed_generate(llm, batch, 1)
            tn, _ = timed_generate(llm, batch, w.max_tokens)
            value = (w.max_tokens - 1) / (tn - t1)
        else:
            dt, _ = timed_generate(llm, batch, w.max_tokens)
            value = len(batch) * w.max_tokens / dt
        if k > 0:
            samples.append(value)
        print(f"[vllm] {name} rep {k}{' (warm-up)' if k == 0 else ''}: {value:.2f} {w.unit}", flush=True)
    return samples


def plan_prompts(a: argparse.Namespace, high: int) -> dict[str, list[list[list[int]]]]:
    """Per workload, the prompt batches of warm-up + repetitions, all distinct, drawn from ``a.seed``."""
    plan = {}
    for i, name in enumerate(a.workloads.split(",")):
        w = WORKLOADS[name]
        reps = 1 + (a.reps if w.timing in ("ttft", "prefill") else a.reps_long)
        flat = random_prompts(a.seed * 1000 + i, reps * w.batch, w.prompt_len, high)
        plan[name] = [flat[k * w.batch:(k + 1) * w.batch] for k in range(reps)]
    return plan


def run(a: argparse.Namespace) -> dict:
    """Do the whole run (or the dry run) and return the result dict, written to ``a.out`` after every step."""
    config = read_config(a.checkpoint)
    high = token_high(config)
    s = PeerSettings(str(a.checkpoint.resolve()), a.gpu_memory_utilization, a.max_model_len, a.enforce_eager,
                     a.prefix_caching, a.seed)
    result = new_result(s.checkpoint, a.seed, {**asdict(s), "prompt_ids": [0, high], "conc": CONC}, a.dry_run,
                        a.workloads.split(","))
    greedy, greedy_n = read_greedy_prompts(a.greedy_prompts, high)
    if max(map(len, greedy)) + greedy_n > a.max_model_len:
        raise ValueError(f"a greedy prompt plus {greedy_n} tokens exceeds --max-model-len {a.max_model_len}; shorten it")
    result["greedy"].update(max_tokens=greedy_n, prompts=greedy)
    plan = plan_prompts(a, high)
    result["env"] = {"python": platform.python_version(), "host": platform.node()}
    result["checkpoint_probe"] = {"gate_up_global_scales": probe_global_scales(a.checkpoint)}
    write_result(a.out, result)
    if a.dry_run:
        return result

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    import torch
    import vllm

    result["version"] = vllm.__version__
    result["env"].update(torch=torch.__version__, cuda=torch.version.cuda)
    try:
        t0 = time.perf_counter()
        llm = build_llm(s)
        result["startup_s"] = time.perf_counter() - t0
        # after the engine: CUDA is initialised by vLLM, not before it
        result["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        result["greedy"]["tokens"] = timed_generate(llm, greedy, greedy_n)[1]  # first: cheap, and kept if time runs out
        write_result(a.out, result)
        for name, batches in plan.items():
            w = WORKLOADS[name]
            result["workloads"][name] = summarize(measure(llm, name, batches), w.unit, w.higher_is_better, w.method)
            write_result(a.out, result)
    except BaseException as e:
        result["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        write_result(a.out, result)
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point: 0 on success, 1 on a bad checkpoint or prompt file (message on stderr)."""
    a = parse_args(argv)
    try:
        result = run(a)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    figs = {n: (w["median"], w["unit"]) for n, w in result["workloads"].items()}
    print(f"[vllm] wrote {a.out}: startup {result['startup_s']} s, {figs}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

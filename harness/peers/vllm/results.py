"""Prompts, statistics and the result JSON of the vLLM peer run; standard library only.

Kept apart from ``run_vllm.py`` so the result shape and the prompt draw can be tested on a
machine without vLLM or a GPU. The workloads are DESIGN.md's "Benchmark workloads".

Result JSON (``harness/bench.py`` reads it; keys beyond these may be added, none removed)::

    {"peer": "vllm", "version": "0.25.1", "checkpoint": "/tmp/ckpt", "gpu": "NVIDIA H200",
     "startup_s": 190.2, "seed": 0, "settings": {...}, "env": {...}, "dry_run": false, "error": null,
     "workloads": {"ttft": {"unit": "ms", "higher_is_better": false, "median": 92.5,
                            "spread": 1.3, "samples": [...], "method": "..."},
                   "decode-bs1": {"unit": "tok/s", ...}, "conc32": {"unit": "tok/s", ...}, ...},
     "greedy": {"max_tokens": 16, "prompts": [[...]], "tokens": [[...]]}}
"""

from __future__ import annotations

import json
import os
import random
import statistics
from dataclasses import dataclass
from pathlib import Path

PROMPT_LEN = 256
CONC = 32
#: timing methods, as in ``harness.workloads.TIMINGS`` (``run_vllm.measure`` dispatches on them)
TIMINGS = ("ttft", "decode", "conc", "prefill")


@dataclass(frozen=True)
class Workload:
    """One DESIGN.md workload: ``batch`` requests of ``prompt_len`` tokens, ``max_tokens`` out each, timed by ``timing``.

    The same definitions as ``harness.workloads.WORKLOADS`` at full size (``tests/test_workloads_vllm.py``
    checks it); kept apart because this file runs on the device without the repository's packages.
    """

    name: str
    unit: str
    higher_is_better: bool
    batch: int
    prompt_len: int
    max_tokens: int
    method: str
    timing: str


def _ttft(name: str, prompt_len: int) -> Workload:
    return Workload(name, "ms", False, 1, prompt_len, 1,
                    f"wall time of LLM.generate for one {prompt_len}-token prompt and max_tokens=1 (prefill + first token + scheduling), ms",
                    "ttft")


def _conc(streams: int) -> Workload:
    return Workload(f"conc{streams}", "tok/s", True, streams, PROMPT_LEN, 256,
                    f"{streams}*256 / wall time of one LLM.generate over {streams} prompts (prefill included), aggregate output tok/s",
                    "conc")


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    _ttft("ttft", PROMPT_LEN),
    Workload("decode-bs1", "tok/s", True, 1, PROMPT_LEN, 256,
             "255 / (t_256 - t_1): wall times of generate with max_tokens=256 and =1 on the same prompt", "decode"),
    _conc(CONC),
    _conc(64),
    _conc(128),
    _ttft("ttft-2k", 2048),
    _ttft("ttft-8k", 8192),
    Workload("prefill-16k", "prompt tok/s", True, 1, 16000, 1,
             "16000 / wall time of LLM.generate for one 16,000-token prompt and max_tokens=1, prompt tok/s", "prefill"),
)}


def model_len_needed(names: list[str]) -> int:
    """Tokens one sequence of the workloads ``names`` reaches: max(prompt_len + max_tokens). Raises KeyError on an unknown name."""
    return max(WORKLOADS[n].prompt_len + WORKLOADS[n].max_tokens for n in names)


#: config keys whose ids are special tokens; random prompts stay below the lowest of them.
_SPECIAL_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "image_token_id", "video_token_id",
                 "vision_start_token_id", "vision_end_token_id")


def token_high(config: dict) -> int:
    """Exclusive upper bound for random prompt ids: the lowest special-token id in ``config``
    (top level and ``text_config``) that lies inside the vocabulary, else ``vocab_size``.

    Qwen3.5/3.6 put every special token at 248044 and above (vocab 248320); an image
    placeholder id in a text prompt would be a different workload. Raises ValueError when
    the config has no ``vocab_size``.
    """
    text = config.get("text_config", config)
    vocab = text.get("vocab_size", config.get("vocab_size"))
    if not isinstance(vocab, int) or vocab < 2:
        raise ValueError("checkpoint config.json has no vocab_size (in text_config or at top level): is it an HF config?")
    ids = [d.get(k) for d in (config, text) for k in _SPECIAL_KEYS]
    flat = [i for x in ids for i in (x if isinstance(x, list) else [x]) if isinstance(i, int) and 0 < i < vocab]
    return min(flat, default=vocab)


def random_prompts(seed: int, n: int, length: int, high: int) -> list[list[int]]:
    """``n`` prompts of ``length`` token ids uniform in [0, high), from ``random.Random(seed)``."""
    rng = random.Random(seed)
    return [[rng.randrange(high) for _ in range(length)] for _ in range(n)]


def summarize(samples: list[float], unit: str, higher_is_better: bool, method: str = "") -> dict:
    """``{"unit", "higher_is_better", "median", "spread", "samples", "method"}``.

    ``spread`` is max - min of the samples, in ``unit`` (absolute, so it compares directly
    with a difference of medians). Empty ``samples`` give ``median``/``spread`` None.
    Raises ValueError on a NaN or infinite sample (a broken measurement must not pass as a figure).
    """
    if any(x != x or x in (float("inf"), float("-inf")) for x in samples):
        raise ValueError(f"non-finite benchmark sample in {samples}: the measurement is broken")
    med = statistics.median(samples) if samples else None
    spread = (max(samples) - min(samples)) if samples else None
    return {"unit": unit, "higher_is_better": higher_is_better, "median": med, "spread": spread,
            "samples": list(samples), "method": method}


def read_greedy_prompts(path: Path | None, high: int) -> tuple[list[list[int]], int]:
    """Prompts for the greedy cross-check and the tokens to generate for each.

    The file is JSON: a list of token-id lists, or ``{"prompts": [[...]], "max_tokens": N}``
    (default N 16). Without a file, 4 prompts of lengths 5, 17, 64, 200 are drawn from seed 1234.
    Raises ValueError naming the problem for an empty list, a non-integer id, or an id
    outside [0, high).
    """
    if path is None:
        rng = random.Random(1234)
        return [[rng.randrange(high) for _ in range(n)] for n in (5, 17, 64, 200)], 16
    d = json.loads(Path(path).read_text())
    prompts, max_tokens = (d, 16) if isinstance(d, list) else (d.get("prompts"), d.get("max_tokens", 16))
    if not isinstance(prompts, list) or not prompts:
        raise ValueError(f"{path}: expected a non-empty list of prompts (lists of token ids) or {{'prompts': [...]}}")
    for i, p in enumerate(prompts):
        if not isinstance(p, list) or not p or not all(isinstance(t, int) and 0 <= t < high for t in p):
            raise ValueError(f"{path}: prompt {i} must be a non-empty list of integer token ids in [0, {high})")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"{path}: max_tokens must be a positive integer, got {max_tokens!r}")
    return prompts, max_tokens


def new_result(checkpoint: str, seed: int, settings: dict, dry_run: bool, names: list[str] | None = None) -> dict:
    """The result skeleton: every workload of ``names`` (default: all) present with null figures until measured.
    Raises KeyError on an unknown name."""
    chosen = [WORKLOADS[n] for n in names] if names is not None else list(WORKLOADS.values())
    return {
        "peer": "vllm", "version": None, "checkpoint": checkpoint, "gpu": None, "startup_s": None,
        "seed": seed, "settings": settings, "env": {}, "dry_run": dry_run, "error": None,
        "workloads": {w.name: summarize([], w.unit, w.higher_is_better, w.method) for w in chosen},
        "greedy": {"max_tokens": None, "prompts": [], "tokens": []},
    }


def write_result(path: Path, result: dict) -> None:
    """Write ``result`` as JSON atomically (temp file + rename), so a run killed mid-way leaves the last complete state."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)

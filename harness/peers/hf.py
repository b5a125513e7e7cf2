"""The HF transformers peer: ``Qwen3_5MoeForCausalLM`` with the checkpoint's weights, greedy, EOS ignored.

Weights come from ``metainfer.checkpoint.CheckpointReader.hf_state_dict`` (NVFP4 experts
dequantized, so HF runs bf16); the model is built from the checkpoint's ``text_config`` and
generates with ``min_new_tokens = max_new_tokens`` (no early stop). DESIGN.md quotes its
batch-1 decode on the H200 at about 9.5 tok/s (eager, fla kernels).
"""

from __future__ import annotations

import statistics

import torch

from harness import stats
from harness.peers import PeerRequest
from harness.workloads import WORKLOADS, measure


class HfRunner:
    """``Qwen3_5MoeForCausalLM`` behind the ``harness.workloads.Runner`` protocol."""

    name = "hf"

    def __init__(self, checkpoint, device: str, dtype: torch.dtype = torch.bfloat16) -> None:
        """Build the model from the checkpoint's text config and load its weights on ``device``.

        Raises:
            metainfer.errors.CheckpointError: a bad checkpoint (from the reader).
            RuntimeError: the state dict does not fit the model (missing or unexpected keys).
        """
        from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
        from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

        from metainfer.checkpoint import CheckpointReader

        reader = CheckpointReader(checkpoint)
        config = Qwen3_5MoeTextConfig(**{k: v for k, v in reader.text_config.items() if k != "model_type"})
        self.device = torch.device(device)
        with self.device:  # built where it runs (rotary buffers included), then overwritten by the checkpoint
            model = Qwen3_5MoeForCausalLM._from_config(config, dtype=dtype)
        missing, unexpected = model.load_state_dict(reader.hf_state_dict(dtype), strict=False)
        if missing or unexpected:
            raise RuntimeError(f"checkpoint does not fit Qwen3_5MoeForCausalLM: missing {missing[:5]}, unexpected {unexpected[:5]}")
        self.model = model.eval()
        self.vocab_size = config.vocab_size

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        """Greedy generation of exactly ``max_tokens`` ids per prompt (equal-length prompts, no padding)."""
        ids = torch.tensor(prompts, dtype=torch.long, device=self.device)
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_tokens,
                                  min_new_tokens=max_tokens, do_sample=False, pad_token_id=0)
        return out[:, ids.shape[1]:].tolist()


def run(req: PeerRequest) -> dict:
    """Warm once, then ``req.rounds`` samples of the workload; the summary our engine's figures use."""
    runner = HfRunner(req.checkpoint, req.device)
    w = WORKLOADS[req.workload]
    measure(w, runner, req.shapes, seed=-1)
    samples = [measure(w, runner, req.shapes, seed=req.seed * 1000 + r) for r in range(req.rounds)]
    return {"peer": "hf", "unit": w.unit, "median": statistics.median(samples), "spread": stats.spread(samples), "samples": samples}

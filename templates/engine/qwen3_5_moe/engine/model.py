"""The text model's forward (HF ``Qwen3_5MoeTextModel`` + ``lm_head``) over one ``Batch``.

Each decoder layer: ``h += mixer(norm(h))`` with the mixer Gated DeltaNet or gated attention
by the layer pattern, then ``h += moe(norm(h))``; the residual add is fused into the next
norm (``kernels.rmsnorm(x, w, eps, residual)``). The final zero-centred norm and ``lm_head``
give fp32 logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import kernels
from .attention import Rope, attention_forward
from .batch import Batch
from .cache import StateCache
from .gdn import gdn_forward
from .moe import moe_forward, pack_moe_weights
from .target import ModelDims
from .tunables import Tunables
from .weights import Weights


@dataclass
class ForwardOut:
    """``logits`` fp32 [R, V] for the requested rows; ``hidden`` fp32 [L+1, T, H] (index 0 the
    embeddings, l+1 the output of layer l before the final norm) and ``mixer`` fp32 [L, T, H] (layer l's
    token mixer output, attention or Gated DeltaNet, before its residual add), or None."""

    logits: torch.Tensor
    hidden: torch.Tensor | None
    mixer: torch.Tensor | None = None


class Model:
    """Weights + the forward; holds no per-sequence state (that is the ``StateCache``)."""

    def __init__(self, weights: Weights, dims: ModelDims, tunables: Tunables, device: torch.device):
        self.w = weights
        self.dims = dims
        self.tunables = tunables
        self.rope = Rope(dims, device)
        self.launch = tunables.launch_keywords()
        if tunables.moe_ops:  # NVFP4 experts to the layout of ops/moe_fused.py (and kept as loaded for small T)
            pack_moe_weights(weights, keep_checkpoint=tunables.moe_ops_min_tokens > 1)
        self.fp32_out_mm = _fp32_out_mm_supported(device)

    @torch.inference_mode()
    def forward(self, batch: Batch, cache: StateCache, *, rows: torch.Tensor | None = None, return_hidden: bool = False) -> ForwardOut:
        """Run all layers over the batch, advancing the slots' state.

        Args:
            rows: int64 [R], the packed rows to compute logits for (None: all T rows).
            return_hidden: also return every layer's output hidden states and token-mixer outputs (fp32, for
                parity: the judge compares each mixer apart, since the MoE writes more into the residual stream).
        Returns:
            ``ForwardOut``.
        """
        d = self.dims
        eps = d.rms_norm_eps
        h = F.embedding(batch.tokens, self.w.embed)  # [T, H] bf16
        hidden = [h.float()] if return_hidden else None
        mixers: list[torch.Tensor] = []
        mlp_out = None
        cos_sin = self.rope.cos_sin(batch.positions) if self.dims.full_attention_layers else None  # once per forward
        kv_loc = cache.kv.locate(batch.token_slots, batch.positions) if self.dims.full_attention_layers else None  # same
        for i, layer in enumerate(self.w.layers):
            x, h = kernels.rmsnorm(mlp_out, layer.input_norm, eps, residual=h) if mlp_out is not None else kernels.rmsnorm(h, layer.input_norm, eps)
            if layer.kind == "full_attention":
                mix = attention_forward(x, layer.attn, i, batch, cache, cos_sin, d, self.tunables.attention_decode_splits,
                                       self.tunables.attention_prefill_ops, kv_loc)
            else:
                mix = gdn_forward(x, layer.gdn, i, batch, cache, d, self.tunables)
            if hidden is not None:
                mixers.append(mix.float())
            x, h = kernels.rmsnorm(mix, layer.post_norm, eps, residual=h)
            mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)
            if hidden is not None:
                hidden.append((h.float() + mlp_out.float()).to(h.dtype).float())
        x, _ = kernels.rmsnorm(mlp_out, self.w.norm, eps, residual=h)
        if rows is not None:
            x = x[rows]
        mixer = torch.stack(mixers) if hidden is not None else None
        return ForwardOut(self.lm_head(x), torch.stack(hidden) if hidden is not None else None, mixer)

    def lm_head(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 logits [R, V] of final-normed x bf16 [R, H], accumulated in fp32 and never rounded to bf16
        (bf16 logits tie often: 8 mantissa bits). On CPU the weight is upcast per call (small models only), and each
        row's logits do not depend on the other rows (``kernels.ref.mm_rows``)."""
        if self.fp32_out_mm:
            return torch.mm(x, self.w.lm_head.t(), out_dtype=torch.float32)
        if x.device.type == "cpu":
            return kernels.ref.mm_rows(x, self.w.lm_head)
        return F.linear(x, self.w.lm_head).float()  # no fp32-output GEMM in this torch build


def _fp32_out_mm_supported(device: torch.device) -> bool:
    """Whether ``torch.mm(bf16, bf16, out_dtype=float32)`` runs on ``device`` (CUDA in recent torch)."""
    if device.type != "cuda":
        return False
    a = torch.ones(16, 16, dtype=torch.bfloat16, device=device)
    try:
        torch.mm(a, a, out_dtype=torch.float32)
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return True


"""Roofline figures: bytes moved and FLOPs per decode step / prefill, over a GPU profile's rates.

Byte count of one decode step of ``B`` sequences at context ``C`` (DESIGN.md, "The H200 and
the peer"; docs/BENCHMARKS.md, "Roofline"):

    bytes = dense weights (every non-expert linear, norm, conv, router, lm_head, read once)
          + B embedding rows
          + shared expert (once per layer)
          + routed experts: E·(1 − (1 − k/E)^B) distinct experts per layer, 3·H·I weights each
            (uniform routing; = k at batch 1)
          + B · (KV cache read of C tokens + write of 1, per full-attention layer, bf16)
          + B · (GDN recurrent state read + write, fp32, and conv state read + write, bf16, per GDN layer)

A weight the format quantizes costs ``quant.bits_per_weight`` bits (NVFP4: 4 + 8/16 = 4.5,
block scales included), the rest 16 bits. Roofline time is max(bytes / bandwidth, FLOPs /
matrix rate); the roofline figure of a workload follows from it (tok/s or ms).
"""

from __future__ import annotations

from dataclasses import dataclass

from metainfer.targets import GpuProfile, QuantSpec


@dataclass(frozen=True)
class StepCost:
    """Traffic and work of one engine step.

    Attributes:
        weight_bytes: bytes of weights read (dense + shared + routed experts + embedding rows).
        kv_bytes: bytes of full-attention KV cache read and written.
        state_bytes: bytes of Gated DeltaNet recurrent + conv state read and written.
        flops: matmul FLOPs (2 per multiply-add) of the step.
        tokens: tokens produced (decode: the batch) or consumed (prefill: the prompt).
    """

    weight_bytes: float
    kv_bytes: float
    state_bytes: float
    flops: float
    tokens: int

    @property
    def total_bytes(self) -> float:
        """Every byte the step must move: weights + KV + state."""
        return self.weight_bytes + self.kv_bytes + self.state_bytes

    def seconds(self, gpu: GpuProfile) -> float:
        """Roofline time on ``gpu``: max(bytes / bandwidth, FLOPs / bf16 matrix rate), in seconds."""
        return max(self.total_bytes / (gpu.mem_bw_gbs * 1e9), self.flops / (gpu.bf16_tflops * 1e12))


def _linears(text: dict) -> list[tuple[str, int, int]]:
    """Every non-expert linear ``(canonical module name, N, K)`` of the text model, per layer, plus lm_head."""
    h, v = text["hidden_size"], text["vocab_size"]
    hd, nq, nkv = text["head_dim"], text["num_attention_heads"], text["num_key_value_heads"]
    kd = text["linear_key_head_dim"] * text["linear_num_key_heads"]
    vd = text["linear_value_head_dim"] * text["linear_num_value_heads"]
    nv = text["linear_num_value_heads"]
    si = text["shared_expert_intermediate_size"]
    out = []
    for layer, kind in enumerate(text["layer_types"]):
        p = f"layers.{layer}"
        if kind == "full_attention":
            out += [(f"{p}.self_attn.q_proj", 2 * nq * hd, h), (f"{p}.self_attn.k_proj", nkv * hd, h),
                    (f"{p}.self_attn.v_proj", nkv * hd, h), (f"{p}.self_attn.o_proj", h, nq * hd)]
        else:
            out += [(f"{p}.linear_attn.in_proj_qkv", 2 * kd + vd, h), (f"{p}.linear_attn.in_proj_z", vd, h),
                    (f"{p}.linear_attn.in_proj_b", nv, h), (f"{p}.linear_attn.in_proj_a", nv, h),
                    (f"{p}.linear_attn.out_proj", h, vd)]
        out += [(f"{p}.mlp.gate", text["num_experts"], h), (f"{p}.mlp.shared_expert_gate", 1, h),
                (f"{p}.mlp.shared_expert.gate_proj", si, h), (f"{p}.mlp.shared_expert.up_proj", si, h),
                (f"{p}.mlp.shared_expert.down_proj", h, si)]
    out.append(("lm_head", v, h))
    return out


def _small_params(text: dict) -> int:
    """Parameters outside the linears that every step reads: norms, GDN conv1d, A_log, dt_bias (bf16/fp32, counted at 2 bytes)."""
    h, hd = text["hidden_size"], text["head_dim"]
    conv = (2 * text["linear_key_head_dim"] * text["linear_num_key_heads"]
            + text["linear_value_head_dim"] * text["linear_num_value_heads"]) * text["linear_conv_kernel_dim"]
    n = h  # final norm
    for kind in text["layer_types"]:
        n += 2 * h + (2 * hd if kind == "full_attention" else conv + 2 * text["linear_num_value_heads"] + text["linear_value_head_dim"])
    return n


def expected_distinct_experts(num_experts: int, top_k: int, tokens: int) -> float:
    """E·(1 − (1 − k/E)^T): expected distinct experts one layer touches for T tokens under uniform routing (= k at T = 1)."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** tokens)


def _bytes(n: int, k: int, quantized: bool, quant: QuantSpec) -> float:
    return n * k * (quant.bits_per_weight if quantized else 16.0) / 8.0


def _expert_weights(text: dict) -> int:
    return 3 * text["hidden_size"] * text["moe_intermediate_size"]


def _state_per_seq(text: dict, context: int) -> tuple[float, float]:
    """(KV bytes, GDN state bytes) one decode step moves for one sequence at context ``context``."""
    n_full = text["layer_types"].count("full_attention")
    n_gdn = len(text["layer_types"]) - n_full
    kv_tok = 2 * text["num_key_value_heads"] * text["head_dim"] * 2  # k and v, bf16
    kv = n_full * kv_tok * (context + 1)
    rec = text["linear_num_value_heads"] * text["linear_key_head_dim"] * text["linear_value_head_dim"] * 4  # fp32
    conv_ch = 2 * text["linear_key_head_dim"] * text["linear_num_key_heads"] + text["linear_value_head_dim"] * text["linear_num_value_heads"]
    conv = conv_ch * (text["linear_conv_kernel_dim"] - 1) * 2  # bf16
    return kv, n_gdn * 2 * (rec + conv)  # state read and written back


def decode_step(text: dict, quant: QuantSpec, batch: int = 1, context: int = 0, *, weights_only: bool = False) -> StepCost:
    """Cost of one decode step of ``batch`` sequences, each with ``context`` tokens already cached.

    Args:
        text: the model's HF ``text_config`` dict.
        quant: the weight format (which linears are quantized, bits per weight).
        batch: sequences decoded together (B ≥ 1).
        context: tokens already in each sequence's cache.
        weights_only: leave out KV and state traffic (DESIGN.md's 4.27 GB/token figure is weights only).

    Raises:
        ValueError: batch < 1 or context < 0.
    """
    if batch < 1 or context < 0:
        raise ValueError(f"decode_step needs batch >= 1 and context >= 0, got batch={batch}, context={context}")
    h = text["hidden_size"]
    e, k = text["num_experts"], text["num_experts_per_tok"]
    wb = sum(_bytes(n, kk, quant.is_quantized(m), quant) for m, n, kk in _linears(text))
    wb += _small_params(text) * 2 + batch * h * 2  # norms/conv + embedding rows
    distinct = expected_distinct_experts(e, k, batch)
    expert_q = quant.is_quantized("layers.0.mlp.experts.0.gate_proj")
    wb += len(text["layer_types"]) * distinct * _expert_weights(text) * (quant.bits_per_weight if expert_q else 16.0) / 8.0
    active = sum(n * kk for _, n, kk in _linears(text)) + len(text["layer_types"]) * k * _expert_weights(text)
    kv, state = _state_per_seq(text, context)
    if weights_only:
        kv = state = 0.0
    return StepCost(wb, batch * kv, batch * state, 2.0 * batch * active, batch)


def prefill(text: dict, quant: QuantSpec, tokens: int) -> StepCost:
    """Cost of prefilling one ``tokens``-long prompt into an empty cache (logits of the last token only).

    FLOPs: 2·T·(active linear weights, lm_head once) + causal attention 2·2·T²/2·nq·hd per
    full-attention layer + GDN state updates about 4·T·nv·dk·dv per GDN layer.

    Raises:
        ValueError: tokens < 1.
    """
    if tokens < 1:
        raise ValueError(f"prefill needs tokens >= 1, got {tokens}")
    t = text
    cost = decode_step(t, quant, batch=tokens, context=0, weights_only=True)
    lm = 2.0 * t["vocab_size"] * t["hidden_size"]
    linear_flops = cost.flops / tokens  # per token, lm_head included
    flops = tokens * (linear_flops - lm) + lm
    wb = cost.weight_bytes  # dense weights once, distinct experts for T tokens, T embedding rows
    n_full = t["layer_types"].count("full_attention")
    n_gdn = len(t["layer_types"]) - n_full
    flops += n_full * 2.0 * tokens * tokens * t["num_attention_heads"] * t["head_dim"]
    flops += n_gdn * 4.0 * tokens * t["linear_num_value_heads"] * t["linear_key_head_dim"] * t["linear_value_head_dim"]
    kv, state = _state_per_seq(t, 0)
    # kv at context 0 is one token's worth, written T times; the GDN state is written once
    return StepCost(wb, kv * tokens, state / 2, flops, tokens)


def decode_tok_s(text: dict, quant: QuantSpec, gpu: GpuProfile, batch: int = 1, context: int = 0, *, weights_only: bool = False) -> float:
    """Roofline aggregate output tokens/s of decoding ``batch`` sequences at ``context`` on ``gpu``."""
    step = decode_step(text, quant, batch, context, weights_only=weights_only)
    return batch / step.seconds(gpu)


def ttft_ms(text: dict, quant: QuantSpec, gpu: GpuProfile, prompt_tokens: int) -> float:
    """Roofline time to first token (prefill of one prompt, one output token), in ms."""
    return prefill(text, quant, prompt_tokens).seconds(gpu) * 1e3

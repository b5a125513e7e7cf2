"""Target facts of this engine, rendered by `metainfer render` for qwen3.6-35b-a3b-nvfp4-h200.

Every size the engine is shaped by comes from the model's HF ``text_config``; the loader
checks a checkpoint's config against these values and refuses a mismatch (re-render for
that model instead). Nothing here is tunable: tunables live in ``tunables.json``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelDims:
    """Dims of the Qwen3.5/3.6-MoE text model, plus the weight format and GPU of the target.

    Attention: ``q_proj`` gives per head [q(head_dim) | gate(head_dim)]; RoPE rotates the
    first ``rotary_dim`` dims of each head. Gated DeltaNet: ``in_proj_qkv`` gives
    q ``key_dim`` | k ``key_dim`` | v ``value_dim`` (``conv_dim`` channels in all); each key
    head serves ``linear_num_value_heads // linear_num_key_heads`` consecutive value heads.
    """

    target: str
    model: str
    quant: str  # "bf16" or "nvfp4"
    gpu: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    rms_norm_eps: float
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    partial_rotary_factor: float
    rotary_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    key_dim: int
    value_dim: int
    conv_dim: int
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    shared_expert_intermediate_size: int
    eos_token_id: int
    max_position_embeddings: int
    layer_types: tuple[str, ...]  # per layer: "linear_attention" (Gated DeltaNet) or "full_attention"
    gpu_mem_bw_gbs: float
    gpu_bf16_tflops: float
    gpu_native_fp4: bool

    @property
    def full_attention_layers(self) -> tuple[int, ...]:
        """Indices of the full-attention layers (they own a KV cache)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == "full_attention")

    @property
    def linear_attention_layers(self) -> tuple[int, ...]:
        """Indices of the Gated DeltaNet layers (they own conv and recurrent state)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")


DIMS = ModelDims(
    target="qwen3.6-35b-a3b-nvfp4-h200",
    model="qwen3.6-35b-a3b",
    quant="nvfp4",
    gpu="h200",
    hidden_size=2048,
    num_layers=40,
    vocab_size=248320,
    rms_norm_eps=1e-06,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    rope_theta=10000000.0,
    partial_rotary_factor=0.25,
    rotary_dim=64,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    key_dim=2048,
    value_dim=4096,
    conv_dim=8192,
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    eos_token_id=248044,
    max_position_embeddings=262144,
    layer_types=(
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
        "linear_attention",
        "linear_attention",
        "linear_attention",
        "full_attention",
    ),
    gpu_mem_bw_gbs=4250.0,
    gpu_bf16_tflops=790.0,
    gpu_native_fp4=False,
)

#: text-config keys the loader compares with a checkpoint's ``text_config`` (name in
#: the config -> attribute of ``DIMS``); a difference means the engine was rendered for
#: another model.
CONFIG_KEYS = {
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "vocab_size": "vocab_size",
    "num_attention_heads": "num_attention_heads",
    "num_key_value_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "linear_num_key_heads": "linear_num_key_heads",
    "linear_num_value_heads": "linear_num_value_heads",
    "linear_key_head_dim": "linear_key_head_dim",
    "linear_value_head_dim": "linear_value_head_dim",
    "linear_conv_kernel_dim": "linear_conv_kernel_dim",
    "num_experts": "num_experts",
    "num_experts_per_tok": "num_experts_per_tok",
    "moe_intermediate_size": "moe_intermediate_size",
    "shared_expert_intermediate_size": "shared_expert_intermediate_size",
    "layer_types": "layer_types",
}

"""The parity reference: HF transformers' ``Qwen3_5MoeForCausalLM`` with the checkpoint's weights.

DESIGN.md, "Numerical parity": the reference is HF's own text model, eager attention, fed the
very weights the engine reads. For an NVFP4 checkpoint it gets the dequantized experts
(``CheckpointReader.hf_state_dict``), so parity measures the engine, not the quantization.
Every sequence runs alone (batch 1, no padding, no attention mask), so the reference has no
batching effects of its own to explain away.

Greedy generation is a loop of full forwards (no KV/state cache): slower than HF's cached
decode, but correct by construction and independent of HF's cache API, which changes
between transformers releases.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from metainfer.errors import CheckpointError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse_dtype(name: str) -> torch.dtype:
    """``"float32"`` / ``"bfloat16"`` → torch dtype.

    Raises:
        ValueError: any other name; the message lists the accepted ones.
    """
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown reference dtype {name!r}; use one of {', '.join(DTYPES)}") from None


def _build_model(text_config: dict, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

    cfg = Qwen3_5MoeTextConfig(**{k: v for k, v in text_config.items() if k != "model_type"})
    cfg._attn_implementation = "eager"
    with torch.device(device):
        model = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager", dtype=dtype)
    return model


def load_strict(model: torch.nn.Module, weights) -> None:
    """Copy weights into ``model``: every key consumed, none missing, every shape equal.

    Args:
        weights: a dict of HF-named tensors, or an iterable of ``(name, tensor)`` pairs (streamed:
            each is copied in as it comes, so a full-size model is never held twice).
    Raises:
        CheckpointError: naming the missing, unexpected and mis-shaped keys.
    """
    own = model.state_dict()
    seen: set[str] = set()
    extra: list[str] = []
    shapes: list[str] = []
    items = weights.items() if isinstance(weights, dict) else weights
    with torch.no_grad():
        for name, tensor in items:
            seen.add(name)
            if name not in own:
                extra.append(name)
            elif tuple(own[name].shape) != tuple(tensor.shape):
                shapes.append(f"{name} {tuple(tensor.shape)} != {tuple(own[name].shape)}")
            else:
                own[name].copy_(tensor)
    missing = sorted(set(own) - seen)
    if missing or extra or shapes:
        raise CheckpointError(
            "reference weights do not match Qwen3_5MoeForCausalLM: "
            f"missing {missing[:8]}{'...' if len(missing) > 8 else ''} ({len(missing)}), "
            f"unexpected {sorted(extra)[:8]}{'...' if len(extra) > 8 else ''} ({len(extra)}), "
            f"mis-shaped {sorted(shapes)[:8]}; check CheckpointReader.hf_state_dict against the checkpoint's text config"
        )


@dataclass(frozen=True)
class ReferenceRun:
    """One prompt through the reference.

    Attributes:
        prompt: the prompt's token ids (length P ≥ 1).
        continuation: the reference's greedy continuation (length n).
        logits: teacher-forced logits over ``prompt + continuation``, float32 [P + n, V], on CPU;
            row t predicts token t + 1, so rows P-1 .. P+n-2 predicted the continuation.
    """

    prompt: list[int]
    continuation: list[int]
    logits: torch.Tensor


class Reference:
    """HF ``Qwen3_5MoeForCausalLM`` on one device and dtype, in eval mode, no grad.

    Build with :meth:`from_checkpoint` (the normal path) or :meth:`from_state_dict` (tests).
    All outputs come back as float32 CPU tensors.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype):
        self.model = model.eval()
        self.device = device
        self.dtype = dtype
        self.num_layers = len(model.model.layers)
        self.vocab_size = model.config.vocab_size

    @classmethod
    def from_state_dict(
        cls, text_config: dict, state_dict: dict[str, torch.Tensor], *, device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> Reference:
        """Build from a text config dict and HF-named weights (``model.layers.*``, ``lm_head.weight``).

        Raises:
            CheckpointError: keys or shapes do not match (see :func:`load_strict`).
        """
        device = torch.device(device)
        model = _build_model(text_config, dtype, device)
        load_strict(model, state_dict)
        return cls(model, device, dtype)

    @classmethod
    def from_checkpoint(
        cls, checkpoint: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
    ) -> Reference:
        """Build from a checkpoint folder: the weights of ``CheckpointReader(checkpoint).hf_state_dict(dtype)``,
        streamed one tensor at a time and dequantized on ``device`` (a full-size bf16 reference is
        70 GB: it is built on the GPU without a second copy in host memory).

        Raises:
            CheckpointError: the folder does not validate, or its weights do not fit the model.
        """
        from metainfer.checkpoint import CheckpointReader

        reader = CheckpointReader(Path(checkpoint))
        reader.validate()
        device = torch.device(device)
        model = _build_model(reader.text_config, dtype, device)
        load_strict(model, reader.iter_hf_tensors(dtype, device))
        return cls(model, device, dtype)

    def _ids(self, tokens: list[int]) -> torch.Tensor:
        if not tokens:
            raise ValueError("the reference needs at least one token")
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} outside [0, {self.vocab_size})")
        return torch.tensor([tokens], dtype=torch.long, device=self.device)

    @torch.no_grad()
    def logits(self, tokens: list[int]) -> torch.Tensor:
        """Teacher-forced logits, float32 [T, V] on CPU; row t is the distribution of token t + 1."""
        out = self.model(input_ids=self._ids(tokens), use_cache=False)
        return out.logits[0].float().cpu()

    @torch.no_grad()
    def hidden_states(self, tokens: list[int]) -> torch.Tensor:
        """Residual stream per layer, float32 [L + 1, T, H] on CPU.

        Index 0 is the embedding output, index l + 1 the output of decoder layer l (before the
        final norm), taken with forward hooks on the modules, the same layout as the engine's
        ``prefill(..., return_hidden=True)``.
        """
        captured: list[torch.Tensor] = []

        def hook(_module, _inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            captured.append(out[0].float().cpu())  # [T, H]

        inner = self.model.model
        handles = [inner.embed_tokens.register_forward_hook(hook)]
        handles += [layer.register_forward_hook(hook) for layer in inner.layers]
        try:
            self.model(input_ids=self._ids(tokens), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        if len(captured) != self.num_layers + 1:
            raise RuntimeError(f"captured {len(captured)} hidden states, expected {self.num_layers + 1}")
        return torch.stack(captured)

    @torch.no_grad()
    def run(self, prompt: list[int], n: int) -> ReferenceRun:
        """Greedy continuation of ``n`` tokens, then teacher-forced logits over prompt + continuation.

        Each greedy step is a full forward over the sequence so far (argmax of the last row;
        ``torch.argmax`` returns the lowest id on exact ties). Costs n + 1 forwards.
        """
        tokens = list(prompt)
        for _ in range(n):
            tokens.append(int(self.logits(tokens)[-1].argmax()))
        return ReferenceRun(list(prompt), tokens[len(prompt):], self.logits(tokens))

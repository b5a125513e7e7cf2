"""Layer-local reference outputs: every HF decoder layer applied to the engine's own input to it (docs/PARITY.md,
"Layer-local parity").

An engine computing in bfloat16 drifts from the float32 reference through the whole network: rounding in
one layer moves every later layer's input, and the model amplifies it (about 5 % of the logits on the tiny
checkpoint). A precision cut of one op adds an error of about that size or smaller and hides in that
drift. Fed the engine's hidden state ``h[l]`` as its input, reference layer ``l`` shows what the layer
*should* have written from there, so the engine's update ``h[l+1] − h[l]`` is compared with an error of
that one layer only; the same for the final norm and ``lm_head`` from ``h[L]``.

Runs where the reference model is (the reference worker: op ``reference.local``); one forward per call,
hooks swap each layer's input, so it needs nothing of the layer's signature beyond its first argument.
"""

from __future__ import annotations

import torch

from harness.reference import Reference, row_index


@torch.no_grad()
def local_outputs(ref: Reference, tokens: list[int], hidden: torch.Tensor,
                  rows: list[int] | None = None) -> dict[str, torch.Tensor]:
    """Each reference layer ``l`` run on ``hidden[l]`` (the causal sequence ``tokens``, positions 0 … T − 1).

    Args:
        ref: the reference (any device and dtype; ``hidden`` is cast to them).
        tokens: the T token ids ``hidden`` belongs to (the embedding lookup runs but its output is replaced).
        hidden: float32 [L + 1, T, H]: index 0 the embeddings, l + 1 the output of layer l (the engine's
            ``prefill(..., return_hidden=True)`` layout).
        rows: the positions to return (ascending; ``harness.reference.row_index``); None: all T. The layers
            still run on every position (they are causal across them); only what comes back is cut.
    Returns:
        ``outputs`` float32 [L, T, H] on CPU (layer l's output from input ``hidden[l]``), ``mixers`` float32
        [L, T, H] on CPU (layer l's token mixer, ``self_attn`` or ``linear_attn``, on the normed ``hidden[l]``: its
        output before the residual add) and ``logits`` float32 [T, V] on CPU (``lm_head(norm(hidden[L]))``); with
        ``rows``, [L, R, H], [L, R, H] and [R, V].
    Raises:
        ValueError: ``hidden`` is not [L + 1, len(tokens), H] for this model, or is not finite.
        RuntimeError: a decoder layer has no token mixer this knows (``MIXER_NAMES``).
    """
    inner = ref.model.model
    n_layers = len(inner.layers)
    if hidden.ndim != 3 or hidden.shape[0] != n_layers + 1 or hidden.shape[1] != len(tokens):
        raise ValueError(f"hidden states of shape {tuple(hidden.shape)}; expected [{n_layers + 1}, {len(tokens)}, H]")
    if not torch.isfinite(hidden).all():
        raise ValueError("hidden states hold NaN/Inf; layer-local outputs are undefined")
    h = hidden.to(device=ref.device, dtype=ref.dtype)
    index = None if rows is None else row_index(rows, len(tokens), ref.device)
    outputs: list[torch.Tensor] = []
    mixers: list[torch.Tensor] = []

    def feed(index: int):
        def pre(_module, args, kwargs):
            return (h[index].unsqueeze(0), *args[1:]), kwargs
        return pre

    def grab(into: list[torch.Tensor]):
        def hook(_module, _inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            into.append((out[0] if index is None else out[0].index_select(0, index)).float().cpu())
        return hook

    handles = []
    for l, layer in enumerate(inner.layers):
        handles.append(layer.register_forward_pre_hook(feed(l), with_kwargs=True))
        handles.append(layer.register_forward_hook(grab(outputs)))
        handles.append(token_mixer(layer).register_forward_hook(grab(mixers)))
    handles.append(inner.norm.register_forward_pre_hook(feed(n_layers), with_kwargs=True))
    try:
        logits = ref.model(input_ids=ref._ids(tokens), use_cache=False).logits[0]
        logits = (logits if index is None else logits.index_select(0, index)).float().cpu()
    finally:
        for handle in handles:
            handle.remove()
    if len(outputs) != n_layers or len(mixers) != n_layers:
        raise RuntimeError(f"captured {len(outputs)} layer outputs and {len(mixers)} token-mixer outputs, expected {n_layers}")
    return {"outputs": torch.stack(outputs), "mixers": torch.stack(mixers), "logits": logits}


#: Attribute names of a decoder layer's token mixer in HF models (Qwen3.5/3.6: ``self_attn`` on full-attention
#: layers, ``linear_attn`` on Gated DeltaNet layers).
MIXER_NAMES = ("self_attn", "linear_attn")


def token_mixer(layer: torch.nn.Module) -> torch.nn.Module:
    """The token-mixer submodule of one HF decoder layer (the one it owns of ``MIXER_NAMES``).

    Raises:
        RuntimeError: the layer owns none of them.
    """
    for name in MIXER_NAMES:
        mod = getattr(layer, name, None)
        if isinstance(mod, torch.nn.Module):
            return mod
    raise RuntimeError(f"{type(layer).__name__} has no token mixer named {' or '.join(MIXER_NAMES)}")

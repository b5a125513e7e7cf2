"""The layer-local figures of the parity gate (docs/PARITY.md, "Layer-local parity" and "Token-mixer parity"): each
layer of the reference run on the engine's own input to it, compared with what the engine's layer made of that input.

Like ``harness.parity_metrics`` (whose pooling they use), every figure is float64 on CPU and ``inf`` on NaN.
"""

from __future__ import annotations

import torch

from harness.parity_metrics import pooled_rows_error


def local_update_errors(engine: list[torch.Tensor], local: list[torch.Tensor], *, drop: float,
                        min_drop: int = 0) -> list[float]:
    """Layer-local error per layer, pooled over prompts (docs/PARITY.md, "Layer-local parity").

    Args:
        engine: the engine's hidden states per prompt, [L + 1, T_p, H] (0 = embeddings).
        local: per prompt, [L, T_p, H]: reference layer l run on the engine's ``engine[p][l]``
            (``harness.layer_local.local_outputs``).
        drop, min_drop: the fraction of tokens left out per layer, and at least how many (:func:`pooled_rows_error`).
    Returns:
        L floats: for layer l, :func:`pooled_rows_error` of the engine's update ``h[l+1] − h[l]`` against the
        reference layer's ``local[l] − h[l]``, over every prompt's tokens; ``inf`` on NaN.
    Raises:
        ValueError: unequal lists or shapes.
    """
    if not engine or len(engine) != len(local):
        raise ValueError(f"local_update_errors needs matching non-empty lists, got {len(engine)} and {len(local)}")
    for e, r in zip(engine, local, strict=True):
        if e.ndim != 3 or tuple(r.shape) != (e.shape[0] - 1, *e.shape[1:]):
            raise ValueError(f"engine hidden states {tuple(e.shape)} and local outputs {tuple(r.shape)}: expected "
                             "[L + 1, T, H] and [L, T, H]")
    n = engine[0].shape[0] - 1
    return [pooled_rows_error([e[l + 1].double() - e[l].double() for e in engine],
                              [r[l].double() - e[l].double() for e, r in zip(engine, local, strict=True)], drop=drop,
                              min_drop=min_drop)
            for l in range(n)]


def mixer_local_errors(engine: list[torch.Tensor], local: list[torch.Tensor], *, drop: float,
                       min_drop: int = 0) -> list[float]:
    """Per layer, the engine's token-mixer output against the reference's mixer run on the engine's own input,
    pooled over prompts (docs/PARITY.md, "Token-mixer parity").

    Why apart from the layer's update: the MoE of a layer can write ten times more into the residual stream than
    its attention (the synthetic checkpoint: docs/results/h200-2026-12-04-b), so a cut of several per cent in the
    attention moves the layer's update by less than bf16 noise. The mixer's own output has no residual in it.

    Args:
        engine, local: per prompt, [L, R, H] (the same R positions).
        drop, min_drop: as :func:`pooled_rows_error`, per layer.
    Returns:
        L floats, ``inf`` on NaN.
    Raises:
        ValueError: unequal lists or shapes.
    """
    if not engine or len(engine) != len(local):
        raise ValueError(f"mixer_local_errors needs matching non-empty lists, got {len(engine)} and {len(local)}")
    for e, r in zip(engine, local, strict=True):
        if e.ndim != 3 or tuple(e.shape) != tuple(r.shape):
            raise ValueError(f"engine mixer outputs {tuple(e.shape)} and reference ones {tuple(r.shape)}: expected "
                             "equal [L, R, H]")
    return [pooled_rows_error([e[l].double() for e in engine], [r[l].double() for r in local], drop=drop,
                              min_drop=min_drop)
            for l in range(engine[0].shape[0])]


def storage_ratios(reference: list[torch.Tensor]) -> list[float]:
    """Per layer l, ``‖h[l+1]‖ / ‖h[l+1] − h[l]‖`` of the reference's hidden states [L + 1, T_p, H], each norm
    pooled over every prompt's tokens: how large the residual stream is against layer l's update (L floats).

    Raises:
        ValueError: no prompt, or a layer whose update is all zeros.
    """
    if not reference:
        raise ValueError("storage_ratios needs at least one prompt's hidden states")
    h2 = sum(r.double().pow(2).sum(dim=(1, 2))[1:] for r in reference)
    d2 = sum(r.double().diff(dim=0).pow(2).sum(dim=(1, 2)) for r in reference)
    if not bool((d2 > 0).all()):
        raise ValueError("a layer's reference update is all zeros; its storage ratio is undefined")
    return [float(x) for x in (h2 / d2).sqrt()]

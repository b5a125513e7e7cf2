"""Shallow twins: a model's config cut to its first layer periods, every per-layer shape unchanged.

Why: at full size a GPU gate's HF reference must run in bf16 (35 B parameters in float32 do not fit beside the
engine), and its floor hides cuts of about bf16 size in shared ops. One layer period of the real shapes (4.4 B
parameters for Qwen3.6-35B-A3B) has a float32 reference on one H200 (docs/PARITY.md, "A float32 twin pass").
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from metainfer.errors import MetainferError


def shallow_config(config: dict, periods: int) -> dict:
    """``config`` (a whole HF config, text_config nested or not) cut to its first ``periods`` layer periods.

    Keeps ``full_attention_interval`` layers per period (4 for Qwen3.5/3.6: 3 Gated DeltaNet, 1 full attention).

    Raises:
        MetainferError: ``periods`` < 1, or more periods than the model has.
    """
    text = config.get("text_config") or config
    interval = int(text.get("full_attention_interval", 4))
    layers = periods * interval
    if periods < 1 or layers > text["num_hidden_layers"]:
        raise MetainferError(f"shallow twin of {periods} periods: the model has {text['num_hidden_layers'] // interval} "
                             f"periods of {interval} layers; choose 1 to that")
    out = copy.deepcopy(config)
    t = out.get("text_config") or out
    t["num_hidden_layers"] = layers
    t["layer_types"] = list(text["layer_types"][:layers])
    return out


def write_shallow_model(model: str, periods: int, out: Path) -> Path:
    """Write ``<out>/<name>-shallow<periods>/config.json`` for the registered model or model folder ``model``.

    Returns the folder, which ``--model`` accepts (metainfer names the model after it).

    Raises:
        MetainferError: an unknown model, or ``periods`` out of range.
    """
    from metainfer.targets.models import get_model

    spec = get_model(model)
    folder = Path(out) / f"{spec.name}-shallow{periods}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(shallow_config(spec.config, periods), indent=2) + "\n")
    return folder

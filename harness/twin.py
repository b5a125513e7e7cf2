"""The shallow twin's checkpoint and prompts, for the gate's ``twin`` stage (docs/PARITY.md, "A float32 twin pass").

``truncate_checkpoint`` keeps the tensors of the first layers and every non-layer tensor, so a real checkpoint works
the same as a synthetic one. The twin *engine* (the candidate's edits carried onto a render of the twin) is made by
the caller (``metainfer.twin``): the judge never renders templates.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from metainfer.errors import MetainferError

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def truncate_checkpoint(src: Path, periods: int, dest: Path) -> Path:
    """Write ``src`` cut to its first ``periods`` layer periods into ``dest``; return ``dest``.

    Keeps every tensor outside ``...layers.<i>.`` and those of layers below the cut (safetensors shards rewritten,
    index rebuilt); config.json gets the shallow config; other files are copied. Memory: one shard at a time.

    Raises:
        MetainferError: no config.json or safetensors in ``src``, or ``periods`` out of range.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    from metainfer.targets.shallow import shallow_config

    cfg_path = Path(src) / "config.json"
    shards = sorted(Path(src).glob("*.safetensors"))
    if not cfg_path.is_file() or not shards:
        raise MetainferError(f"twin: {src} has no config.json or no *.safetensors; give a checkpoint folder")
    config = shallow_config(json.loads(cfg_path.read_text()), periods)
    layers = (config.get("text_config") or config)["num_hidden_layers"]
    dest.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for shard in shards:
        keep = {}
        with safe_open(str(shard), framework="pt") as f:
            for name in f.keys():
                m = _LAYER.search(name)
                if m is None or name.startswith("mtp.") or int(m.group(1)) < layers:
                    keep[name] = f.get_tensor(name)
        if keep:
            save_file(keep, str(dest / shard.name), metadata={"format": "pt"})
            weight_map.update({k: shard.name for k in keep})
    for p in Path(src).iterdir():
        if p.is_file() and p.suffix != ".safetensors" and p.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copyfile(p, dest / p.name)
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if (Path(src) / "model.safetensors.index.json").is_file():
        (dest / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    return dest


def twin_prompt_lengths(lengths: tuple[int, ...], device: str) -> tuple[int, ...]:
    """A twin pass's prompt lengths: ``lengths``, plus on a GPU one drawn in [12,000, 16,000] when none is that long.

    Why: at RoPE base 1e7 the slow rotary pairs turn at most 1.3 rad within 4,000 positions, and a cut that drops
    them passed full-size parity (docs/results/h200-2026-12-03-b); the twin's float32 reference runs a 12k prompt
    in about 24 s (docs/results/h200-2026-12-03-c).
    """
    from harness.prompts import SeedDrawn

    on_gpu = str(device).startswith("cuda")
    return (*lengths, SeedDrawn(12000, 16000)) if on_gpu and max(int(n) for n in lengths) < 12000 else tuple(lengths)


#: files of a twin that may differ from the candidate's: the rendered facts, the render record and the prose
DEPTH_FILES = ("engine/target.py", "engine/rendered_for.json", "ENGINE.md")


def code_differences(candidate: Path, twin: Path) -> list[str]:
    """Files of ``twin`` that are not the candidate's (outside ``DEPTH_FILES``): added, missing or changed; empty when
    the twin runs the candidate's code. The judge checks this because it does not render the twin itself."""
    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts}

    a, b = files(candidate), files(twin)
    keys = (a.keys() | b.keys()) - set(DEPTH_FILES)
    return sorted(f"{'missing' if k not in b else 'added' if k not in a else 'changed'} {k}" for k in keys if a.get(k) != b.get(k))

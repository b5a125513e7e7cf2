"""Render an engine scaffold (``templates/engine/<family>/``) into ``generated/<target>/``.

Files ending in ``.j2`` are rendered with jinja2 (``StrictUndefined``: a fact the template
asks for and the target lacks is an error, never an empty string) and lose the suffix; every
other file is copied byte for byte. The context holds target facts only (docs/CONTRACTS.md,
"The engine"): the model's text-config dims, its layer pattern, the weight format and the
GPU profile. The result is plain Python a coding agent edits from then on.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jinja2

from metainfer import REPO_ROOT
from metainfer.targets import Target

TEMPLATES = REPO_ROOT / "templates" / "engine"

#: Copied never: caches that a test run or an import may leave inside the template folder.
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}


def render_context(target: Target) -> dict[str, Any]:
    """The facts a template may use, all plain Python values.

    Keys: ``target`` (name), ``model``, ``quant``, ``gpu`` (names), ``family``, ``text``
    (the model's full HF ``text_config`` dict), ``dims`` (the subset the engine is shaped by,
    with derived sizes: ``rotary_dim``, ``conv_dim``, ``key_dim``, ``value_dim``),
    ``layer_types`` (list of ``linear_attention`` / ``full_attention``), ``quantized``
    (module suffixes stored quantized), ``gpu_profile`` (bandwidth, matrix rates,
    memory, ``native_fp4``).
    """
    t = target.model.text
    rope = t.get("rope_parameters") or {}
    head_dim = t["head_dim"]
    key_dim = t["linear_num_key_heads"] * t["linear_key_head_dim"]
    value_dim = t["linear_num_value_heads"] * t["linear_value_head_dim"]
    dims = {
        "hidden_size": t["hidden_size"],
        "num_layers": t["num_hidden_layers"],
        "vocab_size": t["vocab_size"],
        "rms_norm_eps": t["rms_norm_eps"],
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_key_value_heads"],
        "head_dim": head_dim,
        "rope_theta": float(rope.get("rope_theta", t.get("rope_theta", 10000.0))),
        "partial_rotary_factor": float(rope.get("partial_rotary_factor", 1.0)),
        "rotary_dim": int(head_dim * rope.get("partial_rotary_factor", 1.0)),
        "linear_num_key_heads": t["linear_num_key_heads"],
        "linear_num_value_heads": t["linear_num_value_heads"],
        "linear_key_head_dim": t["linear_key_head_dim"],
        "linear_value_head_dim": t["linear_value_head_dim"],
        "linear_conv_kernel_dim": t["linear_conv_kernel_dim"],
        "key_dim": key_dim,
        "value_dim": value_dim,
        "conv_dim": 2 * key_dim + value_dim,
        "num_experts": t["num_experts"],
        "num_experts_per_tok": t["num_experts_per_tok"],
        "moe_intermediate_size": t["moe_intermediate_size"],
        "shared_expert_intermediate_size": t["shared_expert_intermediate_size"],
        "eos_token_id": t["eos_token_id"],
        "max_position_embeddings": t["max_position_embeddings"],
    }
    g = target.gpu
    return {
        "target": target.name,
        "model": target.model.name,
        "quant": target.quant.name,
        "gpu": g.name,
        "family": target.model.family,
        "text": t,
        "dims": dims,
        "layer_types": target.model.layer_types,
        "quantized": list(target.quant.quantized),
        "gpu_profile": {
            "name": g.name,
            "mem_bw_gbs": g.mem_bw_gbs,
            "bf16_tflops": g.bf16_tflops,
            "fp4_tflops": g.fp4_tflops,
            "memory_gib": g.memory_gib,
            "native_fp4": g.native_fp4,
        },
    }


def render_engine(target: Target, out_root: str | Path = "generated", *, force: bool = False) -> Path:
    """Render the target's engine scaffold into ``<out_root>/<target.name>/`` and return that folder.

    Args:
        target: what to render for (``metainfer.targets.make_target``).
        out_root: parent folder of the per-target folders (``generated``).
        force: replace an existing target folder (its contents are deleted first).

    Raises:
        FileNotFoundError: no scaffold for the model's family under ``templates/engine/``.
        FileExistsError: the target folder exists and ``force`` is False (the message says
            to pass ``--force``; an existing engine may hold an agent's accepted work).
        jinja2.UndefinedError: a template uses a fact the context lacks (a template bug).
    """
    src = TEMPLATES / target.model.family
    if not src.is_dir():
        known = sorted(p.name for p in TEMPLATES.iterdir() if p.is_dir()) if TEMPLATES.is_dir() else []
        raise FileNotFoundError(f"no engine scaffold for family {target.model.family!r} at {src}; known: {known}")
    dest = Path(out_root) / target.name
    if dest.exists():
        if not force:
            raise FileExistsError(f"{dest} exists; pass --force to replace it (its current contents are deleted)")
        shutil.rmtree(dest)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(src)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    context = render_context(target)
    tmp = dest.with_name(dest.name + ".rendering")
    if tmp.exists():
        shutil.rmtree(tmp)
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src)
        if path.is_dir() or _SKIP_DIRS.intersection(rel.parts) or path.suffix == ".pyc":
            continue
        if path.suffix == ".j2":
            out = tmp / rel.with_suffix("")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(env.get_template(rel.as_posix()).render(**context))
        else:
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out)
    tmp.rename(dest)  # the target folder appears whole or not at all
    return dest

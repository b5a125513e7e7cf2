"""Render an engine scaffold (``templates/engine/<family>/``) into ``generated/<target>/``.

Files ending in ``.j2`` are rendered with jinja2 (``StrictUndefined``: a fact the template
asks for and the target lacks is an error, never an empty string) and lose the suffix; every
other file is copied byte for byte. The context holds target facts only (docs/CONTRACTS.md,
"The engine"): the model's text-config dims, its layer pattern, the weight format and the
GPU profile. The result is plain Python a coding agent edits from then on.

Every render also writes ``engine/rendered_for.json`` (``RENDERED_FOR``): the model facts and
their digest (``metainfer.checkpoint.facts``), the model's full HF config and where it came
from, and the digest of the template files; the engine's loader refuses a checkpoint whose
facts differ, and ``metainfer upgrade`` diffs the facts of two engines.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import jinja2

from metainfer import REPO_ROOT
from metainfer.targets import Target

TEMPLATES = REPO_ROOT / "templates" / "engine"

#: Copied never: caches that a test run or an import may leave inside the template folder.
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}

#: what the engine was rendered for, relative to the engine folder
RENDERED_FOR = "engine/rendered_for.json"


def template_files(src: Path) -> list[Path]:
    """The files of a template folder that a render reads, sorted (caches and ``.pyc`` left out)."""
    return [p for p in sorted(Path(src).rglob("*"))
            if p.is_file() and not _SKIP_DIRS.intersection(p.relative_to(src).parts) and p.suffix != ".pyc"]


def template_digest(src: Path) -> str:
    """sha256 (16 hex digits) over the relative paths and bytes of ``template_files(src)``."""
    h = hashlib.sha256()
    for p in template_files(src):
        h.update(p.relative_to(src).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def rendered_for(target: Target, src: Path) -> dict[str, Any]:
    """The ``engine/rendered_for.json`` record of one render (schema 1).

    Keys: ``target``, ``model`` (name), ``model_source`` (registry name or config path), ``quant``,
    ``gpu``, ``family``, ``facts`` and ``facts_digest``, ``config`` (the model's full HF config),
    ``template_digest``.
    """
    facts = target.model.facts(target.quant)
    return {"schema": 1, "target": target.name, "model": target.model.name, "model_source": target.model.source,
            "quant": target.quant.name, "gpu": target.gpu.name, "family": target.model.family,
            "facts_digest": facts.digest, "facts": facts.as_dict(), "config": target.model.config,
            "template_digest": template_digest(src)}


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


def render_engine(target: Target, out_root: str | Path = "generated", *, force: bool = False,
                  templates: Path | None = None) -> Path:
    """Render the target's engine scaffold into ``<out_root>/<target.name>/`` and return that folder.

    Args:
        target: what to render for (``metainfer.targets.make_target``).
        out_root: parent folder of the per-target folders (``generated``).
        force: replace an existing target folder (its contents are deleted first).
        templates: the folder holding ``<family>/`` scaffolds; None = the repository's ``templates/engine``
            (``metainfer render --check`` passes an older template tree exported from git).

    Raises:
        FileNotFoundError: no scaffold for the model's family under ``templates/engine/``.
        FileExistsError: the target folder exists and ``force`` is False (the message says
            to pass ``--force``; an existing engine may hold an agent's accepted work).
        jinja2.UndefinedError: a template uses a fact the context lacks (a template bug).
    """
    root = Path(templates) if templates is not None else TEMPLATES
    src = root / target.model.family
    if not src.is_dir():
        known = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
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
    for path in template_files(src):
        rel = path.relative_to(src)
        if path.suffix == ".j2":
            out = tmp / rel.with_suffix("")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(env.get_template(rel.as_posix()).render(**context))
        else:
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out)
    record = tmp / RENDERED_FOR
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(rendered_for(target, src), indent=2, sort_keys=True) + "\n")
    tmp.rename(dest)  # the target folder appears whole or not at all
    return dest

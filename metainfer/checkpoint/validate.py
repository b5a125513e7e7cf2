"""Check a checkpoint's text tensors against the layout its config implies; report every problem at once."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from metainfer.checkpoint.layout import TensorSpec, model_params, nvfp4_tensors
from metainfer.errors import CheckpointError

if TYPE_CHECKING:
    from metainfer.checkpoint.reader import CheckpointReader

_OPTIONAL = (".input_scale", ".input_global_scale")  # activation scales: W4A16 exports may omit them
_MAX_LISTED = 40


def _linear(reader: "CheckpointReader", module: str, n: int, k: int) -> dict[str, TensorSpec]:
    """bf16 form, the FP8 form (e4m3 weight + fp32 scales) or the NVFP4 form, as the checkpoint stores this module."""
    if reader.has(f"{module}.weight") and _shape_dtype(reader, f"{module}.weight")[1] == "F8_E4M3":
        return {f"{module}.weight": TensorSpec((n, k), torch.float8_e4m3fn), f"{module}.weight_scale": _FP8_SCALE,
                f"{module}.input_scale": TensorSpec((), torch.float32)}
    if reader.has(f"{module}.weight_packed") or reader.has(f"{module}.weight_scale"):
        return nvfp4_tensors(module, n, k, reader.convention or "modelopt")
    return {f"{module}.weight": TensorSpec((n, k), torch.bfloat16)}


_FP8_SCALE = TensorSpec((), torch.float32)  # per tensor; a per-row [N, 1] scale is accepted too


def expected_layout(reader: "CheckpointReader") -> dict[str, TensorSpec]:
    """Canonical name → spec of every text tensor the checkpoint should hold (``lm_head.weight`` included).

    Each linear is expected bf16 or NVFP4 as the checkpoint stores it (so a mixed checkpoint
    passes); routed experts fused if the checkpoint stores any layer fused, else unfused.
    """
    out: dict[str, TensorSpec] = {}
    for p in model_params(reader.text_config, mtp=False):
        if p.kind == "experts":
            e, i, h = p.shape
            if reader.fused_experts:
                out[f"{p.name}.gate_up_proj"] = TensorSpec((e, 2 * i, h), torch.bfloat16)
                out[f"{p.name}.down_proj"] = TensorSpec((e, h, i), torch.bfloat16)
                continue
            for x in range(e):
                for proj, (n, k) in (("gate_proj", (i, h)), ("up_proj", (i, h)), ("down_proj", (h, i))):
                    out.update(_linear(reader, f"{p.name}.{x}.{proj}", n, k))
        elif p.name.endswith(".weight") and len(p.shape) == 2:
            out.update(_linear(reader, p.name[: -len(".weight")], *p.shape))
        else:
            out[p.name] = TensorSpec(p.shape, torch.bfloat16)
    return out


def _shape_dtype(reader: "CheckpointReader", name: str) -> tuple[tuple[int, ...], str]:
    stored = reader._stored[name]
    file = reader._file_of[stored]
    if file not in reader._handles:
        reader._read(stored)  # opens the handle
    sl = reader._handles[file].get_slice(stored)
    return tuple(sl.get_shape()), sl.get_dtype()


def _rows(reader: "CheckpointReader", scale_name: str) -> int:
    return _shape_dtype(reader, scale_name.rsplit(".", 1)[0] + ".weight")[0][0]


_ST_DTYPES = {torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3", torch.float32: "F32"}
_FLOATS = ("BF16", "F16", "F32")


def check_layout(reader: "CheckpointReader") -> None:
    """Raise ``CheckpointError`` listing every missing, extra, mis-shaped and mis-typed text tensor.

    Dense weights may be any float dtype on disk (bf16, fp16, fp32); NVFP4 and FP8 pieces must
    be uint8 / float8_e4m3fn / fp32 exactly; a scalar scale may be stored as [] or [1], an FP8
    weight_scale also per row ([N, 1]).
    """
    expected = expected_layout(reader)
    present = set(reader.names())
    missing = sorted(n for n in expected if n not in present and not n.endswith(_OPTIONAL))
    extra = sorted(n for n in present if n not in expected) + sorted(reader._extra)
    bad: list[str] = []
    for name in sorted(present & set(expected)):
        shape, dtype = _shape_dtype(reader, name)
        want = expected[name]
        per_row_fp8 = want is _FP8_SCALE and len(shape) >= 1 and math.prod(shape) in (1, _rows(reader, name))
        if shape != want.shape and not (want.shape in ((), (1,)) and shape in ((), (1,))) and not per_row_fp8:
            bad.append(f"{name}: shape {list(shape)}, expected {list(want.shape)}")
        wdt = _ST_DTYPES.get(want.dtype)
        if (wdt and dtype != wdt) or (wdt is None and dtype not in _FLOATS):
            bad.append(f"{name}: dtype {dtype}, expected {wdt or 'a float dtype (BF16)'}")
    if not (missing or extra or bad):
        return
    parts = [f"{reader.path}: checkpoint does not match its config (prefix {reader.prefix!r}, "
             f"{reader.quant}{'/' + reader.convention if reader.convention else ''}, experts {'fused' if reader.fused_experts else 'unfused'})"]
    for title, items, hint in (
        ("missing", missing, "the checkpoint is incomplete or its config.json describes another model; recopy it or fix the config"),
        ("extra", extra, "tensors the config does not explain (another model, layer count or format?); check config.json"),
        ("mis-shaped or mis-typed", bad, "the config's dims (hidden_size, heads, experts) disagree with the weights; fix config.json or the weights"),
    ):
        if items:
            shown = ", ".join(items[:_MAX_LISTED]) + (f", ... ({len(items) - _MAX_LISTED} more)" if len(items) > _MAX_LISTED else "")
            parts.append(f"{len(items)} {title}: {shown} -- {hint}")
    raise CheckpointError("\n".join(parts))

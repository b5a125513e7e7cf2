"""Generate a parameter's stored tensors: seeded dense weights, fused or unfused experts, NVFP4 pieces.

Dense weights are drawn on the CPU (``metainfer.checkpoint.init``, one generator per tensor
name, so values never depend on order, thread or machine) and rounded to bf16; an NVFP4
weight is ``quantize(bf16 weight)``, so the bf16 and NVFP4 checkpoints of one seed agree; the gate
and up projections of one expert (and of the shared expert) share one global scale, from the
larger amax of the two, as ModelOpt exports them.
The experts of a layer are drawn in parallel threads (torch releases the GIL) and quantized
in batched calls on ``device`` (CUDA when present; the ops are IEEE divisions and
round-to-nearest-even casts, so the bytes should match the CPU's: not yet checked on a GPU).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import torch

from metainfer.checkpoint.init import init_dense, init_expert
from metainfer.checkpoint.layout import Param, is_quantized_module, param_tensors
from metainfer.formats.nvfp4 import E2M1_MAX, E4M3_MAX, NvFp4, global_to_compressed_tensors, quantize
from metainfer.targets.quant import QuantSpec

#: activation amax the synthetic ``input_scale`` stands for (only W4A4 kernels read it).
INPUT_AMAX = 8.0
#: elements per batched quantize call: 2**25 fp32 = 128 MB, so one call's temporaries stay near 1 GB.
QUANT_CHUNK = 2**25


@dataclass
class GenContext:
    """What every parameter's generation shares: format, seed, NVFP4 naming, quantize device, thread pool."""

    quant: QuantSpec
    seed: int
    convention: str = "modelopt"
    device: torch.device = torch.device("cpu")
    pool: ThreadPoolExecutor | None = None
    fused_experts: bool | None = None  # None: the real checkpoints' choice (layout.param_tensors)


def _nvfp4_pieces(module: str, q: NvFp4, convention: str) -> list[tuple[str, torch.Tensor]]:
    input_scale = torch.tensor(INPUT_AMAX / (E2M1_MAX * E4M3_MAX), dtype=torch.float32)
    w, s, s2 = (t.cpu().clone() for t in (q.weight, q.weight_scale, q.weight_scale_2.reshape(())))  # clone: no shared storage
    if convention == "modelopt":
        return [(f"{module}.weight", w), (f"{module}.weight_scale", s),
                (f"{module}.weight_scale_2", s2), (f"{module}.input_scale", input_scale)]
    return [(f"{module}.weight_packed", w), (f"{module}.weight_scale", s),
            (f"{module}.weight_global_scale", global_to_compressed_tensors(s2)),
            (f"{module}.input_global_scale", global_to_compressed_tensors(input_scale))]


def _expert_stack(ctx: GenContext, group: str, proj: str, shape: tuple[int, int], e: int, num_layers: int) -> torch.Tensor:
    """bf16 [E, N, K]: expert x's ``proj`` weight at index x, drawn in parallel (``num_layers``: scaled down_proj init)."""
    draw = lambda x: init_expert(group, x, proj, shape, ctx.seed, num_layers).to(torch.bfloat16)  # noqa: E731
    rows = list(ctx.pool.map(draw, range(e))) if ctx.pool else [draw(x) for x in range(e)]
    return torch.stack(rows)


def _quantize_stack(stack: torch.Tensor, device: torch.device, amax: torch.Tensor | None = None) -> NvFp4:
    """Quantize bf16 [E, N, K] (each expert its own global scale, from ``amax`` fp32 [E] when given,
    else from its own max) in batches of at most ``QUANT_CHUNK`` elements, so fp32 temporaries
    stay around 1 GB at full size."""
    per = max(1, QUANT_CHUNK // stack[0].numel())
    parts = [
        quantize(stack[a : a + per].to(device), None if amax is None else amax[a : a + per].to(device))
        for a in range(0, stack.shape[0], per)
    ]
    return NvFp4(*(torch.cat([getattr(q, f).cpu() for q in parts]) for f in ("weight", "weight_scale", "weight_scale_2")))


def _shared_gate_up_amax(p: Param, dense: torch.Tensor, seed: int) -> float | None:
    """The amax the shared expert's gate_proj and up_proj share (max over both, as ModelOpt exports
    them for one fused GEMM); None for any other weight (its own amax)."""
    for mine, other in ((".shared_expert.gate_proj.weight", ".shared_expert.up_proj.weight"),
                        (".shared_expert.up_proj.weight", ".shared_expert.gate_proj.weight")):
        if p.name.endswith(mine):
            sibling = p.name[: -len(mine)] + other
            kind = "linear_up" if other.endswith("up_proj.weight") else "linear"
            twin = init_dense(sibling, p.shape, kind, seed, p.num_layers).to(torch.bfloat16)
            return max(float(dense.float().abs().max()), float(twin.float().abs().max()))
    return None


def materialize(p: Param, ctx: GenContext) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield the stored tensors (canonical names) of one parameter, in checkpoint order.

    Fused experts: ``gate_up_proj`` bf16 [E, 2I, H] (gate rows first), then ``down_proj`` [E, H, I].
    Unfused experts: per expert gate, up, down, each bf16 or the NVFP4 pieces.
    """
    layout = param_tensors(p, ctx.quant, convention=ctx.convention, fused_experts=ctx.fused_experts)
    if p.kind != "experts":
        dense = init_dense(p.name, p.shape, p.kind, ctx.seed, p.num_layers).to(torch.bfloat16)
        if p.name in layout and layout[p.name].dtype != torch.uint8:
            yield p.name, dense.to(layout[p.name].dtype)
        else:
            amax = _shared_gate_up_amax(p, dense, ctx.seed)
            yield from _nvfp4_pieces(p.name[: -len(".weight")], quantize(dense.to(ctx.device), amax), ctx.convention)
        return
    e, i, h = p.shape
    shapes = {"gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}
    stack = lambda proj, shape: _expert_stack(ctx, p.name, proj, shape, e, p.num_layers)  # noqa: E731
    if f"{p.name}.gate_up_proj" in layout:
        gate_up = torch.cat([stack("gate_proj", (i, h)), stack("up_proj", (i, h))], dim=1)
        yield f"{p.name}.gate_up_proj", gate_up  # [E, 2I, H]
        del gate_up
        yield f"{p.name}.down_proj", stack("down_proj", (h, i))  # [E, H, I]
        return
    stacks = {proj: stack(proj, shape) for proj, shape in shapes.items()}
    if not is_quantized_module(ctx.quant, f"{p.name}.0.gate_proj"):
        for x in range(e):
            yield from ((f"{p.name}.{x}.{proj}.weight", stacks[proj][x].clone()) for proj in shapes)
        return
    # gate and up of one expert share one global scale (ModelOpt exports them so: one amax for the fused GEMM)
    gate_up_amax = torch.maximum(*(stacks[x].float().abs().amax(dim=(-2, -1)) for x in ("gate_proj", "up_proj")))
    qs = {proj: _quantize_stack(stack, ctx.device, gate_up_amax if proj != "down_proj" else None)
          for proj, stack in stacks.items()}
    del stacks
    for x in range(e):
        for proj, q in qs.items():
            yield from _nvfp4_pieces(f"{p.name}.{x}.{proj}", NvFp4(q.weight[x], q.weight_scale[x], q.weight_scale_2[x]), ctx.convention)

"""Kernel names -> op groups for the gate's profile stage: an ordered registry of regular expressions.

A profiled step yields raw names: Triton kernels by their function name (``_gdn_step_kernel``),
cuBLAS / cuBLASLt kernels by their mangled template names (``nvjet_sm90_tst_...``,
``void cublasLt::splitKreduce_kernel<...>``), PyTorch's own CUDA kernels
(``void at::native::vectorized_elementwise_kernel<...>``), copies (``Memcpy HtoD (Pageable -> Device)``),
and on the CPU the ATen operators (``aten::mm``). ``group_of(name)`` returns the first group whose
pattern matches (``re.search``, case-insensitive), ``other`` when none does.

Grouping by name is approximate by nature: an engine may fuse anything into one kernel, and one
name may serve two ops. Known ambiguities, kept visible rather than guessed: ``_combine_kernel``
is both the split-K attention decode's combine and the MoE GEMM's combine in the template engine
(group ``combine``); cuBLAS kernels serve the dense projections and ``lm_head`` alike (group ``gemm``);
on the CPU most of the model runs through generic ATen ops (``gemm``, ``elementwise``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class OpGroup:
    """One op group: ``name`` (the gate JSON's ``op``), the ``pattern`` its kernel names match, what it covers.

    Attributes:
        name: group name written to the gate JSON.
        pattern: compiled regular expression searched (not full-matched) in a kernel name.
        covers: one line on what the group holds, for readers of the registry.
    """

    name: str
    pattern: re.Pattern[str]
    covers: str


def _g(name: str, pattern: str, covers: str) -> OpGroup:
    return OpGroup(name, re.compile(pattern, re.IGNORECASE), covers)


#: Ordered: the first match wins, so specific names come before the catch-alls (``gemm``, ``memcpy``, ``elementwise``).
GROUPS: tuple[OpGroup, ...] = (
    _g("combine", r"^_combine_kernel$", "the template's split-K attention-decode combine and MoE GEMM combine (same name)"),
    _g("moe", r"moe|expert|^_(moe_gemm|down_token|align|reduce)_kernel$", "MoE GEMMs, token alignment and the routed-output reduction"),
    _g("nvfp4_gemm", r"nvfp4|fp4|e2m1", "NVFP4 GEMV / GEMM kernels (experts and quantized dense linears)"),
    _g("gdn_chunk", r"_gdn_(prep|state|output|prefill)_kernel|chunk.*delta|gdn_chunk", "Gated DeltaNet chunked prefill"),
    _g("gdn_recurrent", r"_gdn_step_kernel|recurrent.*delta|gdn_step|gated_delta", "Gated DeltaNet one-token recurrent update"),
    _g("conv1d", r"conv1d|conv_update|conv_prefill|causal_conv|convolution", "GDN short causal conv1d (prefill and state update)"),
    _g("rope", r"rope|rotary", "rotary embedding (with the fused q/k norm of the template)"),
    _g("rmsnorm", r"rms_?norm|layer_?norm|_norm_kernel", "RMSNorm, gated RMSNorm"),
    _g("attention", r"attention|attn|flash|fmha|sdpa|scaled_dot_product", "full-attention prefill and decode"),
    _g("routing", r"route|router|topk|sort|softmax", "MoE router: softmax, top-k, renormalisation"),
    _g("gemm", r"nvjet|gemm|gemv|cublas|cutlass|xmma|splitkreduce|dot_kernel|^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$",
       "dense bf16 GEMMs through cuBLAS / CUTLASS / ATen (projections, router, lm_head)"),
    _g("memcpy", r"^mem(cpy|set)|direct_copy|catarray|index_?select|index_put|index_elementwise|gather|scatter"
       r"|^aten::(copy_|_to_copy|to|cat|clone|contiguous|index|index_select|index_put_|empty|empty_strided|zeros|zero_|fill_)$",
       "copies, memsets, gathers/scatters, allocations"),
    _g("elementwise", r"elementwise|reduce_kernel|at::native|^triton_(poi|red|per)_|^aten::", "other PyTorch kernels: pointwise ops, reductions"),
)
OTHER = "other"
#: every group name in registry order, then ``other``
GROUP_NAMES: tuple[str, ...] = tuple(g.name for g in GROUPS) + (OTHER,)


def group_of(kernel_name: str) -> str:
    """The op group of one raw kernel / operator name: the first ``GROUPS`` pattern found in it, else ``other``."""
    for g in GROUPS:
        if g.pattern.search(kernel_name):
            return g.name
    return OTHER


#: Decode-step traffic ``harness.roofline.StepCost`` attributes to one op group alone (group -> StepCost attribute).
#: Nothing else is attributable: roofline.py counts the weights of every linear together (dense, shared, routed,
#: lm_head), which this engine splits over ``nvfp4_gemm``, ``gemm``, ``moe`` kernels in engine-specific ways, and
#: prefill FLOPs (linears, attention, GDN) as one sum. ``gdn_recurrent``'s bytes are roofline.py's GDN state figure,
#: recurrent state plus the small conv1d state (a few % of it at full size), so its fraction is a little generous.
DECODE_ROOFLINE_BASIS: dict[str, str] = {"attention": "kv_bytes", "gdn_recurrent": "state_bytes"}
#: The op groups that together read the decode step's weights (``StepCost.weight_bytes``: every linear, dense and
#: expert, plus lm_head, norms, conv weights and the B embedding rows): their summed time is set against those bytes
#: as the phase's ``matmul`` figure (decode only: at a few tokens the linears are bound by bytes, not FLOPs).
DECODE_WEIGHT_OPS: tuple[str, ...] = ("moe", "nvfp4_gemm", "gemm")


"""Input checks shared by both backends: cheap Python-side shape/dtype tests, no device syncs.

Each raises ValueError naming the argument, what it got, what it needs and how to fix it.
"""

from __future__ import annotations

import torch

_E4M3 = torch.float8_e4m3fn
_INT = (torch.int32, torch.int64)


def _fail(op: str, msg: str) -> None:
    raise ValueError(f"{op}: {msg}")


def _shape(op: str, name: str, t: torch.Tensor, want: tuple) -> None:
    if tuple(t.shape) != tuple(want):
        _fail(op, f"{name} has shape {tuple(t.shape)}, expected {tuple(want)}")


def _dtype(op: str, name: str, t: torch.Tensor, want) -> None:
    wants = want if isinstance(want, tuple) else (want,)
    if t.dtype not in wants:
        _fail(op, f"{name} has dtype {t.dtype}, expected {' or '.join(map(str, wants))}; convert it with .to()")


def _rank(op: str, name: str, t: torch.Tensor, n: int) -> None:
    if t.dim() != n:
        _fail(op, f"{name} must be {n}-D, got shape {tuple(t.shape)}")


def _contig(op: str, name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        _fail(op, f"{name} must be contiguous (it is updated in place or read with flat offsets); pass a contiguous buffer")


def _act(op: str, name: str, t: torch.Tensor) -> None:
    """An activation: bf16 with a contiguous last dim (rows may be strided)."""
    _dtype(op, name, t, torch.bfloat16)
    if t.dim() and t.stride(-1) != 1:
        _fail(op, f"{name} must have a contiguous last dim (stride {t.stride(-1)}); call .contiguous() first")


def check_norm(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None) -> None:
    """rmsnorm: x [T, H], w [H], residual like x."""
    _rank("rmsnorm", "x", x, 2)
    _act("rmsnorm", "x", x)
    _shape("rmsnorm", "w", w, (x.shape[1],))
    if residual is not None:
        _shape("rmsnorm", "residual", residual, tuple(x.shape))
        _act("rmsnorm", "residual", residual)


def check_gated_norm(o: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> None:
    """gated_rmsnorm: o, z [N, D] or [T, NH, D] (rows strided freely), w [D]."""
    if o.dim() not in (2, 3):
        _fail("gated_rmsnorm", f"o must be 2-D [N, D] or 3-D [T, NH, D], got shape {tuple(o.shape)}")
    _act("gated_rmsnorm", "o", o)
    _act("gated_rmsnorm", "z", z)
    _shape("gated_rmsnorm", "z", z, tuple(o.shape))
    _shape("gated_rmsnorm", "w", w, (o.shape[-1],))


def _check_nvfp4(op: str, prefix: str, packed: torch.Tensor, scale: torch.Tensor, n: int, k: int, lead: tuple) -> None:
    if k % 16:
        _fail(op, f"K = {k} is not a multiple of 16 (one e4m3 scale per 16 elements); keep this weight in bf16")
    _dtype(op, f"{prefix}packed", packed, torch.uint8)
    _dtype(op, f"{prefix}scale", scale, _E4M3)
    _shape(op, f"{prefix}packed", packed, (*lead, n, k // 2))
    _shape(op, f"{prefix}scale", scale, (*lead, n, k // 16))


def check_linear(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, gscale: torch.Tensor) -> None:
    """nvfp4_linear: x [M, K], packed uint8 [N, K/2], scale e4m3 [N, K/16], gscale fp32 with one element."""
    _rank("nvfp4_linear", "x", x, 2)
    _act("nvfp4_linear", "x", x)
    _rank("nvfp4_linear", "packed", packed, 2)
    _check_nvfp4("nvfp4_linear", "", packed, scale, packed.shape[0], x.shape[1], ())
    _dtype("nvfp4_linear", "gscale", gscale, torch.float32)
    if gscale.numel() != 1:
        _fail("nvfp4_linear", f"gscale must hold one value (weight_scale_2), got shape {tuple(gscale.shape)}")


def check_moe(x, topk_ids, topk_weights, w13, s13, g13, w2, s2, g2) -> None:
    """moe_nvfp4: see ``kernels.moe_nvfp4`` for the shapes."""
    op = "moe_nvfp4"
    _rank(op, "x", x, 2)
    _act(op, "x", x)
    _rank(op, "topk_ids", topk_ids, 2)
    _rank(op, "w13", w13, 3)
    _rank(op, "w2", w2, 3)
    t_count, hidden = x.shape
    n_exp, two_i = w13.shape[0], w13.shape[1]
    if two_i % 2:
        _fail(op, f"w13 has {two_i} rows per expert; expected 2*I (gate rows then up rows)")
    inter = two_i // 2
    _dtype(op, "topk_ids", topk_ids, _INT)
    _shape(op, "topk_weights", topk_weights, tuple(topk_ids.shape))
    if topk_ids.shape[0] != t_count:
        _fail(op, f"topk_ids has {topk_ids.shape[0]} rows but x has {t_count} tokens")
    _check_nvfp4(op, "w13 ", w13, s13, two_i, hidden, (n_exp,))
    _check_nvfp4(op, "w2 ", w2, s2, hidden, inter, (n_exp,))
    _shape(op, "g13", g13, (n_exp, 2))
    _shape(op, "g2", g2, (n_exp,))
    _dtype(op, "g13", g13, torch.float32)
    _dtype(op, "g2", g2, torch.float32)


def check_gdn_step(q, k, v, g, beta, state, slots) -> None:
    """gdn_recurrent_step: see ``kernels.gdn_recurrent_step`` for the shapes."""
    op = "gdn_recurrent_step"
    _rank(op, "q", q, 3)
    _rank(op, "v", v, 3)
    b, hk, dk = q.shape
    hv, dv = v.shape[1], v.shape[2]
    _shape(op, "k", k, (b, hk, dk))
    _shape(op, "v", v, (b, hv, dv))
    if hv % hk:
        _fail(op, f"HV = {hv} is not a multiple of HK = {hk}; each qk head must serve a whole group of v heads")
    _shape(op, "g", g, (b, hv))
    _shape(op, "beta", beta, (b, hv))
    _dtype(op, "state", state, torch.float32)
    _rank(op, "state", state, 4)
    _shape(op, "state", state, (state.shape[0], hv, dk, dv))
    _contig(op, "state", state)
    _shape(op, "slots", slots, (b,))
    _dtype(op, "slots", slots, _INT)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _act(op, name, t)


def check_gdn_step_gated(q, k, v, a, b, A_log, dt_bias, state, slots) -> None:
    """gdn_recurrent_step_gated: see ``kernels.gdn_recurrent_step_gated`` for the shapes."""
    op = "gdn_recurrent_step_gated"
    _rank(op, "q", q, 3)
    _rank(op, "v", v, 3)
    hv = v.shape[1]
    for name, t in (("a", a), ("b", b)):
        _shape(op, name, t, (q.shape[0], hv))
        _act(op, name, t)
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        _dtype(op, name, t, torch.float32)
        _shape(op, name, t, (hv,))
        _contig(op, name, t)
    check_gdn_step(q, k, v, a, b, state, slots)  # the rest; a, b in g's and beta's place


def check_conv(x, conv_state, weight, slots) -> None:
    """causal_conv1d_update: x [B, C], conv_state [S, C, W-1], weight [C, W], slots [B]."""
    op = "causal_conv1d_update"
    _rank(op, "x", x, 2)
    _rank(op, "conv_state", conv_state, 3)
    b, c = x.shape
    _rank(op, "weight", weight, 2)
    _shape(op, "weight", weight, (c, weight.shape[1]))
    _shape(op, "conv_state", conv_state, (conv_state.shape[0], c, weight.shape[1] - 1))
    _contig(op, "conv_state", conv_state)
    _shape(op, "slots", slots, (b,))
    _dtype(op, "slots", slots, _INT)
    _act(op, "x", x)


def _check_varlen(op: str, t_count: int, cu_seqlens: torch.Tensor, slots: torch.Tensor) -> None:
    _dtype(op, "cu_seqlens", cu_seqlens, _INT)
    _dtype(op, "slots", slots, _INT)
    _rank(op, "cu_seqlens", cu_seqlens, 1)
    _shape(op, "slots", slots, (cu_seqlens.shape[0] - 1,))


def check_gdn_prefill(q, k, v, g, beta, state, cu_seqlens, slots) -> None:
    """gdn_chunk_prefill: q, k [T, HK, Dk], v [T, HV, Dv], g, beta [T, HV], state [S, HV, Dk, Dv]."""
    check_gdn_step(q, k, v, g, beta, state, slots.new_zeros(q.shape[0]))
    _check_varlen("gdn_chunk_prefill", q.shape[0], cu_seqlens, slots)


def check_conv_prefill(x, conv_state, weight, cu_seqlens, slots) -> None:
    """causal_conv1d_prefill: x [T, C], conv_state [S, C, W-1], weight [C, W]."""
    check_conv(x, conv_state, weight, slots.new_zeros(x.shape[0]))
    _check_varlen("causal_conv1d_prefill", x.shape[0], cu_seqlens, slots)


def check_route(logits: torch.Tensor, top_k: int, shared: bool) -> None:
    """route_topk: logits [T, E] (or [T, E+1] with ``shared``), 1 ≤ top_k ≤ E."""
    op = "route_topk"
    _rank(op, "logits", logits, 2)
    _dtype(op, "logits", logits, (torch.bfloat16, torch.float32))
    n_exp = logits.shape[1] - (1 if shared else 0)
    if not 1 <= top_k <= n_exp:
        _fail(op, f"top_k = {top_k} must be in [1, {n_exp}] (the number of routed experts"
              + (", the last logit column being the shared expert's gate)" if shared else ")"))


def check_qk_rope(qkv, q_w, k_w, cos, sin, k_cache, v_cache, token_slots, positions, nq: int, nkv: int) -> None:
    """qk_norm_rope_cache: see ``kernels.qk_norm_rope_cache`` for the shapes."""
    op = "qk_norm_rope_cache"
    _rank(op, "qkv", qkv, 2)
    _act(op, "qkv", qkv)
    _rank(op, "k_cache", k_cache, 4)
    hd = k_cache.shape[-1]
    t = qkv.shape[0]
    if qkv.shape[1] != (2 * nq + 2 * nkv) * hd:
        _fail(op, f"qkv has {qkv.shape[1]} columns; expected (2*nq + 2*nkv)*hd = {(2 * nq + 2 * nkv) * hd} "
                  f"(nq={nq}, nkv={nkv}, hd={hd} from k_cache)")
    if k_cache.shape[2] != nkv:
        _fail(op, f"k_cache has {k_cache.shape[2]} kv heads, expected {nkv}")
    _shape(op, "v_cache", v_cache, tuple(k_cache.shape))
    _contig(op, "k_cache", k_cache)
    _contig(op, "v_cache", v_cache)
    _shape(op, "q_w", q_w, (hd,))
    _shape(op, "k_w", k_w, (hd,))
    _rank(op, "cos", cos, 2)
    if cos.shape[0] != t or cos.shape[1] > hd or cos.shape[1] % 2:
        _fail(op, f"cos has shape {tuple(cos.shape)}; expected [T={t}, rotary_dim] with an even rotary_dim ≤ hd={hd}")
    _shape(op, "sin", sin, tuple(cos.shape))
    _dtype(op, "cos", cos, torch.float32)
    _dtype(op, "sin", sin, torch.float32)
    _shape(op, "token_slots", token_slots, (t,))
    _shape(op, "positions", positions, (t,))
    _dtype(op, "token_slots", token_slots, _INT)
    _dtype(op, "positions", positions, _INT)

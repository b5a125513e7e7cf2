"""Plain-torch reference implementations of every kernel (flash-linear-attention's ``naive.py``).

Each function here is the numerical specification its Triton twin is tested against, and the
path the engine takes on CPU (or when ``kernels.BACKEND = "reference"``). They compute in fp32
and round once at the end, at the same points the Triton kernels round, so a kernel and its
reference differ only by fp32 summation order. Sources of each formula are in the docstrings.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: E2M1 magnitudes for codes 0..7; code | 8 is the negative (DESIGN.md "NVFP4 (facts)").
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
NVFP4_BLOCK = 16


def rmsnorm_ref(
    x: torch.Tensor, w: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-centred RMSNorm with the residual add fused (HF ``Qwen3_5MoeRMSNorm`` + the decoder's add).

    ``s = x + residual`` rounded to x's dtype (HF adds in bf16), then
    ``y = s * rsqrt(mean(s², -1) + eps) * (1 + w)`` in fp32, cast to x's dtype.
    Returns ``(y [T,H], s [T,H])``; without residual, ``s`` is ``x`` itself.
    """
    if residual is not None:
        x = (x.float() + residual.float()).to(x.dtype)
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())
    return y.to(x.dtype), x


def gated_rmsnorm_ref(o: torch.Tensor, z: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """HF ``Qwen3_5MoeRMSNormGated``: ``(w * rmsnorm(o).to(dtype)) * silu(z.float())``, cast to o's dtype.

    o, z: [..., D] (same shape; [N, D] or [T, NH, D]); w: [D] (plain weight, not zero-centred).
    The intermediate rounding to o's dtype is HF's and is kept on purpose.
    """
    dtype = o.dtype
    of = o.float()
    n = (of * torch.rsqrt(of.pow(2).mean(-1, keepdim=True) + eps)).to(dtype)
    return ((w * n).float() * F.silu(z.float())).to(dtype)


def dequant_nvfp4_ref(packed: torch.Tensor, scale: torch.Tensor, gscale: torch.Tensor) -> torch.Tensor:
    """NVFP4 weight to fp32: ``W[n, k] = e2m1(code[n, k]) * scale[n, k // 16] * gscale``.

    packed: uint8 [..., N, K/2] (element 2j low nibble, 2j+1 high); scale: float8_e4m3fn
    [..., N, K/16]; gscale: fp32 broadcastable to [..., 1, 1] (ModelOpt ``weight_scale_2``).
    Returns fp32 [..., N, K].
    """
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=packed.device)
    p = packed.to(torch.int64)
    codes = torch.stack((p & 0xF, p >> 4), dim=-1).flatten(-2)  # [..., N, K]
    mag = lut[codes & 7]
    vals = torch.where((codes & 8) != 0, -mag, mag)
    blocks = scale.float().repeat_interleave(NVFP4_BLOCK, dim=-1)
    return vals * blocks * gscale.float()


def mm_rows(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``a @ w.T`` for a [M, K] and w [N, K] (any float dtypes), float32 [M, N], each row's result independent of the
    other rows. Why float64: the CPU's float32 GEMM takes another kernel, so another summation order, for one row
    than for several (measured: 6e-6 apart at K = 256), and the bf16 rounding after it turns that into a sequence whose
    numbers depend on the batch around it (docs/CONTRACTS.md); in float64 the orders differ by ~1e-16, far below
    float32's rounding."""
    return (a.double() @ w.double().T).float()


def nvfp4_linear_ref(x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, gscale: torch.Tensor) -> torch.Tensor:
    """``x @ W.T`` with W the dequantized NVFP4 weight; x bf16 [M, K] → bf16 [M, N], row-invariant accumulation
    (``mm_rows``)."""
    w = dequant_nvfp4_ref(packed, scale, gscale.reshape(()))
    return mm_rows(x, w).to(x.dtype)


def route_topk_ref(logits: torch.Tensor, top_k: int, shared: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k routing (HF ``Qwen3_5MoeTopKRouter``): fp32 softmax over the E logits, the k largest
    (descending; ties to the lowest expert id), weights renormalised to sum 1.

    logits: [T, E] (bf16 or fp32), or [T, E+1] with ``shared``: column E is the shared expert's
    gate logit, whose ``sigmoid`` rounded to bf16 (HF ``Qwen3_5MoeSparseMoeBlock`` runs it in bf16)
    becomes an extra pair with expert id E, so the shared expert can run as expert E of the stack.
    Returns ``(ids int64 [T, k(+1)], weights fp32 [T, k(+1)])``.
    """
    n_exp = logits.shape[1] - (1 if shared else 0)
    probs = torch.softmax(logits[:, :n_exp].float(), dim=-1)
    # a stable descending sort: among equal probabilities (bf16 logits tie often) the lowest expert id
    # first, as the kernel picks; torch.topk leaves that order unspecified (CPU takes the highest)
    weights, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
    weights, ids = weights[:, :top_k], ids[:, :top_k]
    weights = weights / weights.sum(-1, keepdim=True)
    if shared:
        gate = torch.sigmoid(logits[:, n_exp:].float()).to(torch.bfloat16).float()  # [T, 1]
        weights = torch.cat([weights, gate], dim=-1)
        ids = torch.cat([ids, torch.full_like(ids[:, :1], n_exp)], dim=-1)
    return ids, weights


def qk_norm_rope_cache_ref(
    qkv: torch.Tensor, q_w: torch.Tensor, k_w: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor, token_slots: torch.Tensor, positions: torch.Tensor,
    num_q_heads: int, num_kv_heads: int, eps: float,
) -> torch.Tensor:
    """The attention prologue (HF ``Qwen3_5MoeAttention.forward`` up to the cache update).

    qkv: bf16 [T, nq*2*hd + 2*nkv*hd] (per q head [q | gate], then k, then v); q_w, k_w: [hd]
    (zero-centred norm weights); cos, sin: fp32 [T, d] (``Rope.cos_sin``, d = rotary_dim);
    k_cache, v_cache: [NB, BS, nkv, hd], rows ``[token_slots[t], positions[t]]`` written (slot, position
    when static; a paged pool's (block, row in block) from ``kv_pool.KVPool.locate``).
    q and k: ``rmsnorm_ref`` per head (rounded), then rotate-half RoPE on the first d dims in
    fp32 (HF ``apply_rotary_pos_emb``), rounded; the rest of the head untouched.
    Returns q bf16 [T, nq, hd].
    """
    t = qkv.shape[0]
    hd = k_cache.shape[-1]
    nq, nkv = num_q_heads, num_kv_heads
    q = qkv[:, : nq * 2 * hd].reshape(t, nq, 2 * hd)[..., :hd]
    k = qkv[:, nq * 2 * hd : nq * 2 * hd + nkv * hd].reshape(t, nkv, hd)
    v = qkv[:, nq * 2 * hd + nkv * hd :].reshape(t, nkv, hd)

    def norm_rope(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = rmsnorm_ref(x.reshape(-1, hd), w, eps)[0].reshape(x.shape)
        d = cos.shape[1]
        rot = y[..., :d].float()
        rotated = torch.cat([-rot[..., d // 2 :], rot[..., : d // 2]], dim=-1)
        out = rot * cos[:, None, :] + rotated * sin[:, None, :]
        return torch.cat([out.to(y.dtype), y[..., d:]], dim=-1)

    slots, pos = token_slots.to(torch.int64), positions.to(torch.int64)
    k_cache[slots, pos] = norm_rope(k, k_w).to(k_cache.dtype)
    v_cache[slots, pos] = v.to(v_cache.dtype)
    return norm_rope(q, q_w)


def moe_nvfp4_ref(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    w13: torch.Tensor,
    s13: torch.Tensor,
    g13: torch.Tensor,
    w2: torch.Tensor,
    s2: torch.Tensor,
    g2: torch.Tensor,
) -> torch.Tensor:
    """Routed experts: ``out[t] = sum_j w[t,j] * down_e(silu(gate_e(x_t)) * up_e(x_t))``, e = ids[t,j].

    HF ``Qwen3_5MoeExperts.forward`` with NVFP4 weights. Rows [0, I) of w13 are gate (global
    scale g13[e, 0]), rows [I, 2I) up (g13[e, 1]). gate/up in fp32 (``mm_rows``: row-invariant), the activation
    ``silu(gate) * up`` rounded to x's dtype (the kernel stores it in bf16 between the GEMMs),
    down and the weighted sum over k in fp32, one final cast. Shapes: x [T,H], ids/weights
    [T,k], w13 [E,2I,H/2], s13 [E,2I,H/16], g13 [E,2], w2 [E,H,I/2], s2 [E,H,I/16], g2 [E].
    """
    t_count, hidden = x.shape
    inter = w13.shape[1] // 2
    out = torch.zeros(t_count, hidden, dtype=torch.float32, device=x.device)
    ids = topk_ids.to(torch.int64)
    for e in torch.unique(ids).tolist():
        tok, pos = torch.where(ids == e)
        g = torch.cat([g13[e, 0].expand(inter), g13[e, 1].expand(inter)]).reshape(-1, 1)
        w_gu = dequant_nvfp4_ref(w13[e], s13[e], g)  # [2I, H]
        gu = mm_rows(x[tok], w_gu)  # [n, 2I]
        h = (F.silu(gu[:, :inter]) * gu[:, inter:]).to(x.dtype)
        w_d = dequant_nvfp4_ref(w2[e], s2[e], g2[e])  # [H, I]
        y = mm_rows(h, w_d)  # [n, H]
        out.index_add_(0, tok, y * topk_weights[tok, pos].float().unsqueeze(-1))
    return out.to(x.dtype)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    """HF/fla ``l2norm``: ``x * rsqrt(sum(x²) + 1e-6)`` over the last dim, fp32."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def gdn_recurrent_step_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """One decode step of the gated delta rule (HF ``torch_recurrent_gated_delta_rule``, T = 1).

    q, k: [B, HK, Dk]; v: [B, HV, Dv]; g, beta: fp32 [B, HV]; state: fp32 [S, HV, Dk, Dv],
    rows ``state[slots]`` read and written in place; slots: int [B], distinct.
    q, k are L2-normalised, q scaled by Dk^-0.5, qk head h serves v heads [h*r, (h+1)*r),
    r = HV/HK. ``S ← S·exp(g); δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq``. Returns o [B, HV, Dv] in v's dtype.
    """
    hv, dk = v.shape[1], q.shape[2]
    r = hv // q.shape[1]
    qf = _l2norm(q.float()).repeat_interleave(r, dim=1) * dk**-0.5  # [B, HV, Dk]
    kf = _l2norm(k.float()).repeat_interleave(r, dim=1)
    idx = slots.to(torch.int64)
    s = state[idx] * g.float().exp()[..., None, None]  # [B, HV, Dk, Dv]
    kv = (s * kf.unsqueeze(-1)).sum(-2)  # [B, HV, Dv]
    delta = (v.float() - kv) * beta.float().unsqueeze(-1)
    s = s + kf.unsqueeze(-1) * delta.unsqueeze(-2)
    o = (s * qf.unsqueeze(-1)).sum(-2)
    state[idx] = s
    return o.to(v.dtype)


def gdn_recurrent_step_gated_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    state: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """``gdn_recurrent_step_ref`` with its gates computed from the raw in_proj outputs (HF's formulas).

    a, b: [B, HV]; A_log, dt_bias: [HV]. ``beta = sigmoid(b)``, ``g = -exp(A_log) * softplus(a + dt_bias)``
    (torch softplus: threshold 20), all in fp32; the rest as ``gdn_recurrent_step_ref``.
    """
    beta = torch.sigmoid(b.float())
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())
    return gdn_recurrent_step_ref(q, k, v, g, beta, state, slots)


def causal_conv1d_update_ref(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """One decode step of the depthwise causal conv1d + SiLU (HF ``causal_conv1d_update``, no bias).

    x: [B, C]; conv_state: [S, C, W-1], the last W-1 inputs of each slot, oldest first, updated in
    place for ``slots`` (shift left, append x); weight: [C, W]. ``y = silu(sum_w window[:, w] * weight[:, w])``
    over ``window = [state | x]`` in fp32, cast to x's dtype once. Returns y [B, C].
    """
    idx = slots.to(torch.int64)
    window = torch.cat([conv_state[idx].float(), x.float().unsqueeze(-1)], dim=-1)  # [B, C, W]
    y = F.silu((window * weight.float()).sum(-1))
    conv_state[idx] = window[..., 1:].to(conv_state.dtype)
    return y.to(x.dtype)

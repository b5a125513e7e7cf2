"""Gated DeltaNet mixer (HF ``Qwen3_5MoeGatedDeltaNet``) over packed sequences with slot state.

``in_proj`` gives qkv | z | b | a. qkv goes through a causal depthwise conv1d (kernel W, no
bias) + SiLU, continuing each slot's last W-1 inputs; then q | k | v split. ``beta = sigmoid(b)``,
``g = -exp(A_log) * softplus(a + dt_bias)`` (fp32). The gated delta rule runs per value head with
an fp32 state [dk, dv]: ``S ← S·exp(g); δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq`` with q, k
L2-normalised and q × dk^-0.5; each key head serves ``nv/nk`` consecutive value heads. Prefill
uses the chunked (UT-transform) form below, decode the recurrent step kernel; they are the same
math, so any split of a sequence between them gives the same result up to fp32 rounding.
Output: ``out_proj(w * rmsnorm(o) * silu(z))``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import kernels
from .batch import Batch
from .cache import StateCache
from .linear import linear
from .target import ModelDims
from .weights import GdnWeights


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def chunk_gated_delta_rule(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked gated delta rule for one sequence (HF ``torch_chunk_gated_delta_rule``, qk L2-norm on).

    Args:
        q, k: [n, HK, dk]; v: [n, HV, dv] (any float dtype); g, beta: fp32 [n, HV];
        state: fp32 [HV, dk, dv], the state before the first token (not modified);
        chunk: tokens per chunk (any size ≥ 1; the result does not depend on it beyond fp32 rounding).
    Returns:
        o fp32 [n, HV, dv], final state fp32 [HV, dk, dv].
    """
    n, hk, dk = q.shape
    hv = v.shape[1]
    r = hv // hk
    qf = (_l2norm(q.float()) * dk**-0.5).repeat_interleave(r, dim=1).transpose(0, 1)  # [HV, n, dk]
    kf = _l2norm(k.float()).repeat_interleave(r, dim=1).transpose(0, 1)
    vf = v.float().transpose(0, 1)  # [HV, n, dv]
    gf, bf = g.float().transpose(0, 1), beta.float().transpose(0, 1)  # [HV, n]
    pad = (-n) % chunk
    if pad:  # padded steps have k = v = beta = 0 and g = 0: they leave the state unchanged
        qf, kf, vf = (F.pad(t, (0, 0, 0, pad)) for t in (qf, kf, vf))
        gf, bf = F.pad(gf, (0, pad)), F.pad(bf, (0, pad))
    nc = (n + pad) // chunk
    qc, kc, vc = (t.reshape(hv, nc, chunk, -1) for t in (qf, kf, vf))  # [HV, nc, C, d]
    gc, bc = gf.reshape(hv, nc, chunk), bf.reshape(hv, nc, chunk)
    cum = gc.cumsum(-1)  # [HV, nc, C] log decay from chunk start to each step
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(upper, float("-inf")).exp()  # [HV, nc, C, C]
    k_beta, v_beta = kc * bc[..., None], vc * bc[..., None]
    # UT transform: (I + tril(diag(β) K Kᵀ ⊙ decay, -1)) U = [V_β | K_β·exp(cum)]
    system = (k_beta @ kc.transpose(-1, -2)) * decay
    system = system.masked_fill(~torch.ones_like(upper).tril(-1), 0) + torch.eye(chunk, device=q.device)
    rhs = torch.cat([v_beta, k_beta * cum.exp()[..., None]], dim=-1)
    sol = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w = sol[..., : vc.shape[-1]], sol[..., vc.shape[-1] :]  # [HV, nc, C, dv], [HV, nc, C, dk]
    attn = (qc @ kc.transpose(-1, -2)) * decay  # [HV, nc, C, C], lower triangle incl. diagonal
    q_dec = qc * cum.exp()[..., None]
    k_dec = kc * (cum[..., -1:] - cum).exp()[..., None]
    chunk_decay = cum[..., -1].exp()  # [HV, nc]
    s = state.float().clone()
    out = torch.empty_like(vc)
    for c in range(nc):
        v_new = u[:, c] - w[:, c] @ s  # [HV, C, dv]
        out[:, c] = q_dec[:, c] @ s + attn[:, c] @ v_new
        s = s * chunk_decay[:, c, None, None] + k_dec[:, c].transpose(-1, -2) @ v_new
    o = out.reshape(hv, nc * chunk, -1)[:, :n].transpose(0, 1)
    return o, s


def _conv_prefill(x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Causal depthwise conv + SiLU of x [n, C] continuing conv_state [C, W-1] (updated in place); fp32 math, bf16 out."""
    window = torch.cat([conv_state.float(), x.float().T], dim=-1)  # [C, W-1+n]
    y = F.conv1d(window[None], weight.float()[:, None, :], groups=window.shape[0])[0]  # [C, n]
    conv_state.copy_(window[:, -conv_state.shape[-1] :])
    return F.silu(y).T.to(x.dtype)


def gdn_forward(
    x: torch.Tensor, w: GdnWeights, layer: int, batch: Batch, cache: StateCache, dims: ModelDims, chunk: int
) -> torch.Tensor:
    """One Gated DeltaNet mixer over the packed tokens, advancing each slot's conv and delta-rule state.

    Args:
        x: bf16 [T, H], the input-normed hidden states.
        layer: model layer index (selects the state tensors).
        chunk: chunk size of the prefill form (tunable ``gdn_chunk_size``).
    Returns:
        bf16 [T, H].
    """
    t = x.shape[0]
    nk, nv = dims.linear_num_key_heads, dims.linear_num_value_heads
    dk, dv = dims.linear_key_head_dim, dims.linear_value_head_dim
    proj = linear(x, w.in_proj)
    mixed, z, b, a = proj.split([dims.conv_dim, dims.value_dim, nv, nv], dim=-1)
    beta = torch.sigmoid(b.float())  # [T, nv]
    g = -w.A_log.exp() * F.softplus(a.float() + w.dt_bias)  # [T, nv]
    j = cache.layer_index[layer]
    conv_state, ssm = cache.conv[j], cache.ssm[j]
    if batch.decode:
        mixed = kernels.causal_conv1d_update(mixed.contiguous(), conv_state, w.conv, batch.slots_t)
        q, k, v = mixed.split([dims.key_dim, dims.key_dim, dims.value_dim], dim=-1)
        o = kernels.gdn_recurrent_step(
            q.reshape(t, nk, dk), k.reshape(t, nk, dk), v.reshape(t, nv, dv), g, beta, ssm, batch.slots_t
        )  # [B, nv, dv]
    else:
        o = torch.empty(t, nv, dv, dtype=x.dtype, device=x.device)
        for i, slot in enumerate(batch.slots):
            r0, r1 = batch.cu_seqlens[i], batch.cu_seqlens[i + 1]
            y = _conv_prefill(mixed[r0:r1], conv_state[slot], w.conv)
            q, k, v = y.split([dims.key_dim, dims.key_dim, dims.value_dim], dim=-1)
            n = r1 - r0
            oi, s = chunk_gated_delta_rule(
                q.reshape(n, nk, dk), k.reshape(n, nk, dk), v.reshape(n, nv, dv), g[r0:r1], beta[r0:r1], ssm[slot], chunk
            )
            ssm[slot] = s
            o[r0:r1] = oi.to(x.dtype)
    normed = kernels.gated_rmsnorm(o.reshape(t * nv, dv), z.reshape(t * nv, dv).contiguous(), w.norm, dims.rms_norm_eps)
    return linear(normed.reshape(t, dims.value_dim), w.out_proj)

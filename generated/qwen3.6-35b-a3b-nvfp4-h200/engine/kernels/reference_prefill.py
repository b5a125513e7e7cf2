"""Plain-torch references for the varlen prefill side of the Gated DeltaNet layer.

Sequences are packed along T and delimited by ``cu_seqlens`` (int [N+1], cu[0] = 0,
cu[N] = T); sequence i owns state row ``slots[i]``, read as its initial state and
overwritten with its final state. A new sequence needs its rows zeroed by the caller
first. Loops over sequences on the host: fine for a reference and for CPU parity runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .reference import _l2norm


def causal_conv1d_prefill_ref(
    x: torch.Tensor, conv_state: torch.Tensor, weight: torch.Tensor, cu_seqlens: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """Depthwise causal conv1d + SiLU over packed sequences, continuing from ``conv_state``.

    x: [T, C]; conv_state: [S, C, W-1] (oldest first; zeros for a new sequence); weight: [C, W];
    cu_seqlens: int [N+1]; slots: int [N]. HF ``causal_conv1d_fn`` (zero left padding) when the
    state is zero, HF ``causal_conv1d_update`` applied token by token otherwise. fp32 math, one
    cast. Returns y [T, C] in x's dtype; ``conv_state[slots[i]]`` ← the last W-1 inputs of sequence i.
    """
    y = torch.empty_like(x)
    cu = cu_seqlens.tolist()
    w = weight.float().unsqueeze(1)  # [C, 1, W]
    for i, slot in enumerate(slots.tolist()):
        if cu[i] == cu[i + 1]:
            continue  # an empty sequence keeps its state
        seq = x[cu[i] : cu[i + 1]].float().T  # [C, L]
        window = torch.cat([conv_state[slot].float(), seq], dim=-1)  # [C, W-1+L]
        out = F.conv1d(window.unsqueeze(0), w, groups=x.shape[1])[0]  # [C, L]
        y[cu[i] : cu[i + 1]] = F.silu(out).T.to(x.dtype)
        conv_state[slot] = window[:, window.shape[1] - conv_state.shape[2] :].to(conv_state.dtype)
    return y


def _chunk_one(q, k, v, g, beta, s, chunk):
    """Gated delta rule over one sequence in chunks (HF ``torch_chunk_gated_delta_rule`` math).

    q, k: fp32 [H, L, Dk] (normalised, q scaled); v: [H, L, Dv]; g, beta: [H, L]; s: [H, Dk, Dv].
    Returns (o [H, L, Dv], final state).
    """
    length = q.shape[1]
    pad = (chunk - length % chunk) % chunk
    q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    g, beta = (F.pad(t, (0, pad)) for t in (g, beta))
    h, n_chunks = q.shape[0], q.shape[1] // chunk
    q, k, v = (t.reshape(h, n_chunks, chunk, -1) for t in (q, k, v))
    g, beta = (t.reshape(h, n_chunks, chunk) for t in (g, beta))
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    cum = g.cumsum(-1)  # [H, n, C] log decay from chunk start
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(upper, float("-inf")).exp()  # [H, n, C, C]
    ut = (k_beta @ k.transpose(-1, -2)) * decay
    attn = (q @ k.transpose(-1, -2)) * decay
    # (I + strictly-lower(ut)) u = v_beta: the UT transform of the delta rule within a chunk
    new_v = torch.linalg.solve_triangular(ut, v_beta, upper=False, unitriangular=True)
    k_cum = torch.linalg.solve_triangular(ut, k_beta * cum.exp()[..., None], upper=False, unitriangular=True)
    q_dec = q * cum.exp()[..., None]
    k_dec = k * (cum[..., -1:] - cum).exp()[..., None]
    o = torch.empty_like(v)
    for c in range(n_chunks):
        v_new = new_v[:, c] - k_cum[:, c] @ s
        o[:, c] = q_dec[:, c] @ s + attn[:, c] @ v_new
        s = s * cum[:, c, -1].exp()[:, None, None] + k_dec[:, c].transpose(-1, -2) @ v_new
    return o.reshape(h, n_chunks * chunk, -1)[:, :length], s


def gdn_chunk_prefill_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    cu_seqlens: torch.Tensor,
    slots: torch.Tensor,
    chunk_size: int = 64,
) -> torch.Tensor:
    """Chunked gated delta rule over packed sequences, each starting from ``state[slots[i]]``.

    q, k: bf16 [T, HK, Dk]; v: bf16 [T, HV, Dv]; g, beta: fp32 [T, HV]; state: fp32
    [S, HV, Dk, Dv]; cu_seqlens: int [N+1]; slots: int [N]. Same math as
    ``reference.gdn_recurrent_step_ref`` applied token by token (q, k L2-normalised, q × Dk^-0.5,
    qk head h serves v heads [h*r, (h+1)*r)), computed in chunks of ``chunk_size`` as HF's
    ``torch_chunk_gated_delta_rule``; any chunk size gives the same result up to fp32 rounding.
    Returns o [T, HV, Dv] in v's dtype; writes each sequence's final state back to its slot.
    """
    hv, dk = v.shape[1], q.shape[2]
    r = hv // q.shape[1]
    qf = (_l2norm(q.float()) * dk**-0.5).repeat_interleave(r, dim=1).transpose(0, 1)  # [HV, T, Dk]
    kf = _l2norm(k.float()).repeat_interleave(r, dim=1).transpose(0, 1)
    vf, gf, bf = v.float().transpose(0, 1), g.float().T, beta.float().T  # [HV, T, Dv], [HV, T]
    o = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    cu = cu_seqlens.tolist()
    for i, slot in enumerate(slots.tolist()):
        a, b = cu[i], cu[i + 1]
        if a == b:
            continue
        o_seq, s = _chunk_one(qf[:, a:b], kf[:, a:b], vf[:, a:b], gf[:, a:b], bf[:, a:b], state[slot], chunk_size)
        o[a:b] = o_seq.transpose(0, 1).to(v.dtype)
        state[slot] = s
    return o

"""qk_norm_rope_cache (per-head RMSNorm of q and k, RoPE, K/V cache write): Triton against the
reference on odd shapes, cache rows outside the written ones checked untouched."""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, gpu, load_kernels, needs_cuda, rel_err  # sets TRITON_INTERPRET first

import pytest
import torch


def _case(t, nq, nkv, hd, rot, n_slots=4, seq_len=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(t, (2 * nq + 2 * nkv) * hd, generator=g) * 3).bfloat16()
    q_w, k_w = torch.randn(hd, generator=g).bfloat16() * 0.3, torch.randn(hd, generator=g).bfloat16() * 0.3
    pos = torch.randint(0, seq_len, (t,), generator=g)
    slots = torch.randperm(n_slots, generator=g)[:t] if t <= n_slots else torch.arange(t) % n_slots
    pos = pos if t <= n_slots else torch.arange(t) // n_slots  # (slot, position) pairs distinct
    inv = 1.0 / (1e4 ** (torch.arange(0, rot, 2).float() / rot))
    freqs = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], -1)
    kc = torch.full((n_slots, seq_len, nkv, hd), float("nan")).bfloat16()
    vc = torch.full_like(kc, float("nan"))
    dev = lambda *ts: [x.to(DEVICE) for x in ts]  # noqa: E731
    return dev(qkv, q_w, k_w, emb.cos(), emb.sin(), kc, vc, slots, pos)


@pytest.mark.parametrize("t,nq,nkv,hd,rot", [(1, 2, 1, 64, 16), (3, 3, 1, 48, 12), (5, 4, 2, 32, 32), (9, 2, 2, 64, 64)])
def test_qk_norm_rope_kernel_matches_reference(t, nq, nkv, hd, rot):
    k = load_kernels()
    qkv, q_w, k_w, cos, sin, kc, vc, slots, pos = _case(t, nq, nkv, hd, rot, seed=t)
    kc_ref, vc_ref = kc.clone(), vc.clone()
    q = k.qk_norm_rope_cache(qkv, q_w, k_w, cos, sin, kc, vc, slots, pos, nq, nkv, 1e-6)
    q_ref = k.reference.qk_norm_rope_cache_ref(qkv, q_w, k_w, cos, sin, kc_ref, vc_ref, slots, pos, nq, nkv, 1e-6)
    assert q.shape == (t, nq, hd)
    assert rel_err(q, q_ref) < TOL_BF16
    written = torch.zeros(kc.shape[:2], dtype=torch.bool, device=kc.device)
    written[slots, pos] = True
    assert rel_err(kc[written], kc_ref[written]) < TOL_BF16
    assert torch.equal(vc[written], vc_ref[written])  # a copy
    assert kc[~written].isnan().all() and vc[~written].isnan().all()  # nothing else touched
    # the dims past rotary_dim are the normed values, unrotated: same in q and the reference bit for bit
    if rot < hd:
        assert torch.equal(q[..., rot:], q_ref[..., rot:])


def test_qk_rope_checks_name_the_problem():
    k = load_kernels()
    qkv, q_w, k_w, cos, sin, kc, vc, slots, pos = _case(2, 2, 1, 32, 8)
    with pytest.raises(ValueError, match="columns"):
        k.qk_norm_rope_cache(qkv, q_w, k_w, cos, sin, kc, vc, slots, pos, 3, 1, 1e-6)
    with pytest.raises(ValueError, match="rotary_dim"):
        k.qk_norm_rope_cache(qkv, q_w, k_w, cos[:, :7], sin[:, :7], kc, vc, slots, pos, 2, 1, 1e-6)


@gpu
@needs_cuda
def test_qk_norm_rope_real_shapes():
    k = load_kernels()
    for t in (1, 32, 300):
        qkv, q_w, k_w, cos, sin, kc, vc, slots, pos = _case(t, 16, 2, 256, 64, n_slots=33, seq_len=64, seed=t)
        kc_ref, vc_ref = kc.clone(), vc.clone()
        q = k.qk_norm_rope_cache(qkv, q_w, k_w, cos, sin, kc, vc, slots, pos, 16, 2, 1e-6)
        q_ref = k.reference.qk_norm_rope_cache_ref(qkv, q_w, k_w, cos, sin, kc_ref, vc_ref, slots, pos, 16, 2, 1e-6)
        assert rel_err(q, q_ref) < TOL_BF16
        assert torch.equal(kc.isnan(), kc_ref.isnan()) and rel_err(kc.nan_to_num(), kc_ref.nan_to_num()) < TOL_BF16

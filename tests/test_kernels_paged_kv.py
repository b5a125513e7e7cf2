"""Paged KV cache: every reader and writer of the full-attention cache through a block table, on odd
shapes (Triton under the interpreter on CPU, compiled on CUDA), against the static layout.

Block sizes below the key tile (a block per key) and multiples of it (one block per tile) both run.
Each case builds a static cache [S, L, HKV, D], then the same keys in a pool whose blocks are
shuffled (a sequence's blocks non-contiguous and out of order), with a block size that divides
neither the lengths nor the kernels' key tiles; pool blocks no sequence owns, and the table
entries past a sequence's blocks, point at NaN: a read through a wrong block gives NaN, and NaN
never passes. The references must equal the static ones exactly (the same rows gathered); the
kernels must match them within bf16 rounding.
"""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, TOL_BF16_TWICE, load_kernels, rel_err  # noqa: I001
from test_ops_prefill_common import load_op
from test_ops_prefill_attention import attn_inputs

import importlib

import pytest
import torch

kernels = load_kernels()
ad = importlib.import_module(f"{kernels.__name__}.attention_decode")
paged = importlib.import_module(f"{kernels.__name__}.paged")


def to_pool(static: torch.Tensor, lengths: list[int], slots: list[int], bs: int, seed: int):
    """The first ``lengths[i]`` rows of ``static[slots[i]]`` in a NaN-filled pool of ``bs``-row blocks,
    shuffled; returns (pool [NB, bs, H, D], table int32 [S, max_blocks]). Unowned table entries point
    at a NaN block."""
    s, cap, h, d = static.shape
    mb = -(-cap // bs)
    owned = [-(-n // bs) for n in lengths]
    nb = sum(owned) + 3  # spare NaN blocks
    perm = torch.randperm(nb, generator=torch.Generator().manual_seed(seed)).tolist()
    pool = torch.full((nb, bs, h, d), float("nan"), dtype=static.dtype)
    nan_block = perm[-1]
    table = torch.full((s, mb), nan_block, dtype=torch.int32)
    it = iter(perm)
    for slot, n, k in zip(slots, lengths, owned):
        for i in range(k):
            b = next(it)
            table[slot, i] = b
            rows = static[slot, i * bs : min((i + 1) * bs, n)].cpu()
            pool[b, : rows.shape[0]] = rows
    return pool.to(static.device), table.to(static.device)


def _decode_case(lens, s=5, cap=100, hkv=2, hq=8, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(s, cap, hkv, d, generator=g).bfloat16()
    v = torch.randn(s, cap, hkv, d, generator=g).bfloat16()
    q = torch.randn(len(lens), hq, d, generator=g).bfloat16()
    slots = torch.randperm(s, generator=g)[: len(lens)].to(torch.int32)
    return [x.to(DEVICE) for x in (q, k, v, slots)] + [torch.tensor(lens, dtype=torch.int32, device=DEVICE)]


@pytest.mark.parametrize("lens,bs,splits,block_n", [([1], 8, 1, 16), ([17, 1, 63], 8, 3, 16), ([40, 100, 9], 16, 4, 32),
                                                    ([33], 4, 2, 16),  # a block per key (block < tile)
                                                    ([40, 100, 9], 32, 3, 16), ([65, 2], 64, 2, 16)])  # a block per tile
def test_decode_attention_through_a_shuffled_pool(lens, bs, splits, block_n):
    q, k, v, slots, lens_t = _decode_case(lens, seed=bs + len(lens))
    sl = slots.tolist()
    kp, table = to_pool(k, lens, sl, bs, seed=1)
    vp, _ = to_pool(v, lens, sl, bs, seed=1)
    gate = (torch.randn(len(lens), 8, 32, generator=torch.Generator().manual_seed(3)) * 2).bfloat16().to(DEVICE)
    want = ad.attention_decode_ref(q, k, v, slots, lens_t, 32**-0.5, gate=gate)
    ref = ad.attention_decode_ref(q, kp, vp, slots, lens_t, 32**-0.5, gate=gate, block_table=table)
    out = ad.attention_decode(q, kp, vp, slots, lens_t, 32**-0.5, splits=splits, block_n=block_n, gate=gate, block_table=table)
    assert torch.equal(ref, want)
    assert rel_err(out, want) < TOL_BF16_TWICE


@pytest.mark.parametrize(
    "lens,starts,nq,nkv,hd,bs,blocks",
    [
        ([1, 63, 64, 65], [0, 3, 0, 40], 4, 2, 32, 16, (32, 16)),  # continuations: keys already in the pool
        ([2, 65], [17, 0], 2, 1, 48, 8, (16, 32)),  # a tile spans 4 blocks
        ([50], [70], 2, 2, 16, 32, (64, 64)),  # a block spans half a tile; 120 not a multiple of 32
        ([1, 63, 64, 65], [0, 3, 0, 40], 4, 2, 32, 32, (32, 16)),  # a tile in one block (block_n divides it)
        ([2, 65], [17, 0], 2, 1, 48, 64, (16, 32)),
    ],
)
def test_prefill_attention_through_a_shuffled_pool(lens, starts, nq, nkv, hd, bs, blocks):
    op = load_op("attention_prefill")
    d = attn_inputs(lens, starts, nq, nkv, hd, seed=sum(lens) + bs)
    sl = d["slots"].tolist()
    totals = [s + n for s, n in zip(starts, lens)]
    kp, table = to_pool(d["kc"], totals, sl, bs, seed=2)
    vp, _ = to_pool(d["vc"], totals, sl, bs, seed=2)
    kp0 = kp.clone()
    rest = (d["gate"], d["cu"], d["positions"], d["slots"], hd**-0.5)
    want = op.attention_prefill_ref(d["q"], d["kc"], d["vc"], *rest)
    ref = op.attention_prefill_ref(d["q"], kp, vp, *rest, table)
    out = op.attention_prefill(d["q"], kp, vp, *rest, table, block_m=blocks[0], block_n=blocks[1])
    assert torch.equal(ref, want)
    assert rel_err(out, want) < TOL_BF16_TWICE
    assert torch.equal(kp.isnan(), kp0.isnan()) and torch.equal(kp.nan_to_num(), kp0.nan_to_num())  # only read


@pytest.mark.parametrize("bs", [4, 8])
def test_qk_norm_rope_cache_writes_through_the_table(bs):
    """The writer at (block, row) = the table's place of (slot, position) leaves the pool holding what
    the static write puts at (slot, position); every other pool row stays NaN."""
    g = torch.Generator().manual_seed(bs)
    nq, nkv, hd, t, s, cap = 2, 1, 32, 7, 3, 20
    qkv = (torch.randn(t, (2 * nq + 2 * nkv) * hd, generator=g) * 3).bfloat16().to(DEVICE)
    q_w, k_w = (torch.randn(hd, generator=g).bfloat16().to(DEVICE) * 0.3 for _ in range(2))
    slots = torch.tensor([2, 2, 2, 0, 0, 1, 2], device=DEVICE)
    pos = torch.tensor([9, 10, 11, 0, 1, 13, 12], device=DEVICE)  # slot 2 continues over a block edge
    freqs = pos.float()[:, None] * (1.0 / (1e4 ** (torch.arange(0, hd, 2, device=DEVICE).float() / hd)))[None, :]
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
    kc = torch.full((s, cap, nkv, hd), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    vc = kc.clone()
    q_static = kernels.qk_norm_rope_cache(qkv, q_w, k_w, cos, sin, kc, vc, slots, pos, nq, nkv, 1e-6)
    mb = -(-cap // bs)
    table = torch.randperm(s * mb + 2, generator=g)[: s * mb].reshape(s, mb).to(torch.int32).to(DEVICE)
    kp = torch.full((s * mb + 2, bs, nkv, hd), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    vp = kp.clone()
    blocks, rows = table[slots, pos // bs].long(), pos % bs
    for fn in (kernels.qk_norm_rope_cache, kernels.reference.qk_norm_rope_cache_ref):
        kp.fill_(float("nan")), vp.fill_(float("nan"))
        q = fn(qkv, q_w, k_w, cos, sin, kp, vp, blocks, rows, nq, nkv, 1e-6)
        assert rel_err(q, q_static) < TOL_BF16
        for cache, static in ((kp, kc), (vp, vc)):
            assert rel_err(cache[blocks, rows], static[slots, pos]) < TOL_BF16
            assert int((~cache.isnan()).all(-1).all(-1).sum()) == t  # nothing else written
            for sl in range(s):  # read back through the table: the static rows, NaN where unwritten alike
                got = paged.gather_kv(cache, table, sl, cap)
                assert torch.equal(got.isnan(), static[sl].isnan())


def test_gather_kv_is_the_static_read():
    g = torch.Generator().manual_seed(0)
    static = torch.randn(3, 21, 2, 4, generator=g).bfloat16()
    pool, table = to_pool(static, [21, 5, 13], [0, 1, 2], 4, seed=5)
    for slot, n in ((0, 21), (1, 5), (2, 13), (2, 1)):
        assert torch.equal(paged.gather_kv(pool.cpu(), table.cpu(), slot, n), static[slot, :n])
    with pytest.raises(ValueError, match="int32"):
        paged.check_table("op", pool, table.long())

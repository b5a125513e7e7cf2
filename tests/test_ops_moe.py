"""The MoE W4A16 ops (engine/ops/moe_{pack,align,gemm,reduce,fused}.py) against their references.

On CPU the kernels run under the Triton interpreter (tiny odd shapes); with CUDA the same tests run
compiled. Outputs and intermediates are NaN-poisoned (``kernels._common.POISON_ALLOCATIONS``), and
the experts no pair routes to carry NaN global scales, so reading one (or leaving a row unwritten)
fails the test. Expert distributions: uniform, skewed (most pairs on two experts), degenerate (every
token on the same expert, most experts unhit), and pairs routed to nothing (id -1, graph padding).
"""

from __future__ import annotations

from test_kernels_common import DEVICE, TOL_BF16, load_kernels, rel_err  # noqa: I001  (sets TRITON_INTERPRET first)

import importlib
import sys
import types

import pytest
import torch

from metainfer.formats import nvfp4

PKG = "_engine_moe_under_test"
ENGINE_DIR = load_kernels.__globals__["KERNELS_DIR"].parent


def load_op(name: str):
    """``engine/ops/<name>.py`` of the template inside a stand-in ``engine`` package (its __init__ needs
    the rendered target.py, so it is not run), kernels on the Triton backend with poisoned allocations."""
    load_kernels()  # raises when triton was imported without the interpreter on CPU
    if PKG not in sys.modules:
        pkg = types.ModuleType(PKG)
        pkg.__path__ = [str(ENGINE_DIR)]
        sys.modules[PKG] = pkg
        importlib.import_module(f"{PKG}.kernels").BACKEND = "triton"
        importlib.import_module(f"{PKG}.kernels._common").POISON_ALLOCATIONS = True
    return importlib.import_module(f"{PKG}.ops.{name}")


def _quant(n, k, seed, amp=1.0):
    q = nvfp4.quantize(torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * amp)
    return q.weight, q.weight_scale, q.weight_scale_2


def experts(n_exp: int, hidden: int, inter: int, seed: int, poison: tuple[int, ...] = ()):
    """Checkpoint-layout experts (fresh random weights; up ×3 so gate and up globals differ); the
    experts in ``poison`` get NaN globals and NaN (0x7F) scale bytes."""
    parts = [[] for _ in range(6)]
    for e in range(n_exp):
        gw, gs, gg = _quant(inter, hidden, seed + 3 * e)
        uw, us, ug = _quant(inter, hidden, seed + 3 * e + 1, amp=3.0)
        dw, ds, dg = _quant(hidden, inter, seed + 3 * e + 2)
        for lst, t in zip(parts, (torch.cat([gw, uw]), torch.cat([gs, us]), torch.stack([gg, ug]), dw, ds, dg)):
            lst.append(t)
    w13, s13, g13, w2, s2, g2 = (torch.stack(p) for p in parts)
    for e in poison:
        g13[e] = float("nan")
        g2[e] = float("nan")
        s13[e].view(torch.uint8).fill_(0x7F)
        s2[e].view(torch.uint8).fill_(0x7F)
    return [t.to(DEVICE) for t in (w13, s13, g13, w2, s2, g2)]


def routing(dist: str, t: int, k: int, n_exp: int, seed: int):
    """ids int32 [t, k] (distinct per token unless -1), weights fp32 [t, k] summing to 1 per token."""
    g = torch.Generator().manual_seed(seed)
    if dist == "uniform":
        ids = torch.stack([torch.randperm(n_exp, generator=g)[:k] for _ in range(t)])
    elif dist == "skewed":  # experts 0 and 1 in every token, the rest spread
        ids = torch.stack([torch.cat([torch.tensor([1, 0]), 2 + torch.randperm(n_exp - 2, generator=g)[: k - 2]]) for _ in range(t)])
    elif dist == "degenerate":  # every token on expert 2 only
        ids = torch.full((t, k), -1)
        ids[:, 0] = 2
    elif dist == "holes":  # some pairs routed to nothing
        ids = torch.stack([torch.randperm(n_exp, generator=g)[:k] for _ in range(t)])
        ids[torch.rand(t, k, generator=g) < 0.3] = -1
    else:
        raise ValueError(dist)
    w = torch.rand(t, k, generator=g) + 0.1
    return ids.to(torch.int32).to(DEVICE), (w / w.sum(-1, keepdim=True)).to(DEVICE)


# ---------------------------------------------------------------- repack
@pytest.mark.parametrize("n,k", [(24, 48), (5, 784), (3, 512)])
def test_repack_is_bit_exact(n, k):
    """Unpacking the packed rows gives the checkpoint's bytes back, hence its dequantized weights exactly."""
    pack = load_op("moe_pack")
    g = torch.Generator().manual_seed(n * k)
    codes = torch.randint(0, 256, (2, n, k // 2), dtype=torch.uint8, generator=g)
    scales = torch.randint(0, 256, (2, n, k // 16), dtype=torch.uint8, generator=g)
    scales[scales == 0x7F] = 0x38  # no NaN in the dequantized comparison
    scales[scales == 0xFF] = 0x39
    packed = pack.pack_rows(codes, scales.view(torch.float8_e4m3fn))
    assert packed.shape == (2, n, 160 * -(-k // 256))
    c2, s2 = pack.unpack_rows(packed, k)
    assert torch.equal(c2, codes) and torch.equal(s2.view(torch.uint8), scales)
    ref = load_kernels().reference
    gs = torch.tensor(0.37)
    assert torch.equal(ref.dequant_nvfp4_ref(c2, s2, gs), ref.dequant_nvfp4_ref(codes, scales.view(torch.float8_e4m3fn), gs))
    # the documented placement: element 256 g + 64 i + 2 w + h is nibble i + 4 h of word w of super-group g
    words = packed[0, 0, :128].view(torch.int32)
    for kk in range(min(k, 256)):
        i, w, h = kk // 64, (kk % 64) // 2, kk % 2
        want = (codes[0, 0, kk // 2] >> (4 * (kk % 2))) & 15
        assert ((words[w] >> (4 * (i + 4 * h))) & 15).item() == want.item(), f"element {kk}"
    # and group j's scale is the bf16 s · 2^116 at bytes 128 + 2j, for every e4m3 value but NaN (subnormals included)
    sc = packed[0, 0, 128:160].contiguous().view(torch.bfloat16).float()
    assert torch.equal(sc[: min(k, 256) // 16] * 2.0**-116, scales[0, 0, : min(k, 256) // 16].view(torch.float8_e4m3fn).float())
    every = torch.arange(256, dtype=torch.uint8)
    every = every[(every != 0x7F) & (every != 0xFF)].reshape(1, 254)
    back = pack.unpack_rows(pack.pack_rows(torch.zeros(1, 254 * 8, dtype=torch.uint8), every.view(torch.float8_e4m3fn)), 254 * 16)[1]
    assert torch.equal(back.view(torch.uint8), every)


# ---------------------------------------------------------------- align
@pytest.mark.parametrize("dist,t,block_m,n_valid", [
    ("uniform", 7, 4, None), ("skewed", 13, 16, None), ("degenerate", 9, 4, None), ("holes", 11, 4, 6),
    ("uniform", 300, 16, 257),  # more pairs than one chunk of the kernel's scan
])
def test_align_matches_reference(dist, t, block_m, n_valid):
    al = load_op("moe_align")
    ids, _ = routing(dist, t, 3, 9, seed=t)
    nv = torch.tensor([n_valid], dtype=torch.int32, device=DEVICE) if n_valid is not None else None
    sid, bexp = al.moe_align_triton(ids, 9, block_m, nv)
    sid_ref, bexp_ref = al.moe_align_ref(ids, 9, block_m, n_valid)
    assert torch.equal(bexp.cpu(), bexp_ref.cpu())
    used = int((bexp_ref >= 0).sum()) * block_m
    assert torch.equal(sid[:used].cpu(), sid_ref[:used].cpu())
    listed = sid_ref[:used][sid_ref[:used] < t * 3].long().cpu()
    rows = listed // 3
    assert len(set(listed.tolist())) == listed.numel()  # no pair twice
    if n_valid is not None:
        assert (rows < n_valid).all()  # padding rows route to nothing
    flat = ids.reshape(-1).cpu()
    assert (flat[listed] >= 0).all() and listed.numel() == int(((flat >= 0) & (torch.arange(t * 3) // 3 < (n_valid or t))).sum())


# ---------------------------------------------------------------- the fused op
E, TOP_K = 7, 3  # expert 6 plays the stacked shared expert (in every token's last pair)
BUCKETS = {
    "s-split3": {"s_max_t": 128, "s_block_m": 16, "s_block_n": 16, "s_split_k": 3},
    "s": {"s_max_t": 128, "s_block_m": 16, "s_block_n": 32, "s_split_k": 1},
    "m-split2": {"s_max_t": 0, "m_block_m": 32, "m_block_n": 16, "m_split_k": 2},
    "l": {"s_max_t": 0, "m_max_t": 0, "l_block_m": 64, "l_block_n": 32, "l_split_k": 1},
}


def _case(dist, t, hidden, inter, seed, poison_unhit=True):
    ids, w = routing(dist, t, TOP_K, E - 1, seed)
    ids = torch.cat([ids, torch.full((t, 1), E - 1, dtype=torch.int32, device=DEVICE)], 1)  # the shared pair
    w = torch.cat([w, torch.rand(t, 1, generator=torch.Generator().manual_seed(seed), device="cpu").to(DEVICE)], 1)
    hit = set(ids[ids >= 0].tolist())
    poison = tuple(e for e in range(E) if e not in hit) if poison_unhit else ()
    ex = experts(E, hidden, inter, seed=seed, poison=poison)
    x = torch.randn(t, hidden, generator=torch.Generator().manual_seed(seed + 1)).bfloat16().to(DEVICE)
    return x, ids, w, ex


@pytest.mark.parametrize("dist,t,hidden,inter,bucket", [
    ("uniform", 1, 48, 32, "s"),  # T = 1: no align launch, token-major down with the k-sum inside
    ("holes", 1, 560, 32, "s-split3"),
    ("uniform", 3, 560, 48, "s-split3"),  # 3 super-groups, the last partial; split-K 3
    ("skewed", 17, 48, 32, "m-split2"),  # split 2 > super-groups 1: clamped
    ("skewed", 5, 560, 32, "m-split2"),
    ("degenerate", 9, 80, 16, "s"),
    ("holes", 17, 48, 32, "s"),
    ("uniform", 33, 80, 48, "l"),  # 64-row blocks (wgmma-sized on Hopper)
    ("degenerate", 65, 48, 32, "l"),  # one expert's pairs over two 64-row blocks
])
def test_moe_w4a16_matches_reference(dist, t, hidden, inter, bucket):
    op, pack = load_op("moe_fused"), load_op("moe_pack")
    x, ids, w, ex = _case(dist, t, hidden, inter, seed=t + hidden)
    pk = pack.pack_experts(*ex)
    y = op.moe_w4a16(x, ids, w, pk, **BUCKETS[bucket])
    assert y.shape == (t, hidden) and y.dtype == torch.bfloat16
    ref = op.moe_w4a16_ref(x, ids, w, pk)
    assert rel_err(y, ref) < TOL_BF16
    # the spec itself: the packed reference equals the checkpoint-layout one where no pair is dropped
    if (ids >= 0).all():
        legacy = load_kernels().reference.moe_nvfp4_ref(x, ids, w, *ex)
        assert rel_err(ref, legacy) < 1e-6


def test_token_output_does_not_depend_on_its_batch():
    """Bitwise: token rows computed alone and inside batches of 2, 9 and 17 (other tokens routed to the
    same and to other experts, in other orders and block positions), under different launch buckets
    (block heights 16 to 64, widths 16 and 32, split-K 1 to 3): the summation order depends on K only.
    (Under the interpreter ``moe_gemm._dot`` sums products in K order; the GPU test checks tl.dot.)"""
    op, pack = load_op("moe_fused"), load_op("moe_pack")
    x, ids, w, ex = _case("uniform", 17, 560, 32, seed=3, poison_unhit=False)
    pk = pack.pack_experts(*ex)
    full = op.moe_w4a16(x, ids, w, pk, **BUCKETS["l"])
    for rows, bucket in (([0], "s-split3"), ([5, 0], "s"), (list(range(12, 3, -1)), "m-split2"), (list(range(17)), "s-split3")):
        sel = torch.tensor(rows, device=DEVICE)
        part = op.moe_w4a16(x[sel], ids[sel], w[sel], pk, **BUCKETS[bucket])
        assert torch.equal(part, full[sel]), f"rows {rows[:4]}... under {bucket}: output changed with the batch"


def test_padding_rows_touch_no_expert():
    """Rows ≥ n_valid route to experts whose weights are NaN; the real rows match the reference of the
    real rows alone, and the padding rows come out 0."""
    op, pack = load_op("moe_fused"), load_op("moe_pack")
    x, ids, w, ex = _case("uniform", 8, 48, 32, seed=8, poison_unhit=False)
    ids[5:, :TOP_K] = 5  # padding rows only hit expert 5 (and the shared 6, also read by real rows)
    ids[:5, :TOP_K] = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    ex = [t.clone() for t in ex]
    ex[2][5] = float("nan")
    ex[5][5] = float("nan")
    pk = pack.pack_experts(*ex)
    nv = torch.tensor([5], dtype=torch.int32, device=DEVICE)
    y = op.moe_w4a16(x, ids, w, pk, nv, **BUCKETS["s"])
    assert torch.isfinite(y).all()
    assert torch.equal(y[5:].float().cpu(), torch.zeros(3, 48))
    assert rel_err(y[:5], op.moe_w4a16_ref(x[:5], ids[:5], w[:5], pk)) < TOL_BF16
    assert torch.equal(op.moe_w4a16_ref(x, ids, w, pk, nv)[5:].float().cpu(), torch.zeros(3, 48))


def test_bucket_choice_follows_tunables():
    op = load_op("moe_fused")
    assert op.pick_bucket(1, {}) == op.DEFAULTS["s"] and op.pick_bucket(2048, {}).block_m >= 64
    assert op.pick_bucket(64, {"m_block_n": 128}).block_n == 128
    assert op.pick_bucket(8, {"s_max_t": 4}) == op.DEFAULTS["m"]
    with pytest.raises(ValueError, match="packed layout"):
        x, ids, w, ex = _case("uniform", 2, 48, 32, seed=1, poison_unhit=False)
        op.moe_w4a16(x, ids, w, load_op("moe_pack").PackedExperts(ex[0], ex[2], ex[3], ex[5], 48, 32))

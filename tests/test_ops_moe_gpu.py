"""The MoE W4A16 op (engine/ops/moe_fused.py) on CUDA at the real shapes, and batch invariance end to end.

Marked ``gpu``; skipped without CUDA. Real shapes: H = 2048, I = 512, 256 routed experts + the shared
one stacked as expert 256, k = 8 routed pairs + the shared pair. Run on the device machine:
``python -m pytest -q -m gpu tests/test_ops_moe_gpu.py``.
"""

from __future__ import annotations

from test_kernels_common import TOL_BF16, rel_err  # noqa: I001  (sets TRITON_INTERPRET first on CPU)
from test_ops_moe import load_op

import json

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

H, I, E, TOPK = 2048, 512, 256, 8


def _random_experts(seed: int):
    """Valid random NVFP4 experts at the real shapes (E + 1 with the shared one), on CUDA."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def nvfp4(n, k):
        w = torch.randint(0, 256, (E + 1, n, k // 2), dtype=torch.uint8, device="cuda", generator=g)
        s = (torch.rand(E + 1, n, k // 16, device="cuda", generator=g) * 2 + 0.25).to(torch.float8_e4m3fn)
        return w, s

    w13, s13 = nvfp4(2 * I, H)
    w2, s2 = nvfp4(H, I)
    g13 = torch.rand(E + 1, 2, device="cuda", generator=g) * 0.01 + 0.001
    g2 = torch.rand(E + 1, device="cuda", generator=g) * 0.01 + 0.001
    return w13, s13, g13, w2, s2, g2


def _routing(t: int, seed: int, dist: str = "uniform"):
    g = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.rand(t, E, device="cuda", generator=g)
    if dist == "skewed":  # experts 0..7 win for 90 % of tokens
        scores[torch.rand(t, device="cuda", generator=g) < 0.9, :TOPK] += 2.0
    ids = scores.topk(TOPK, dim=-1).indices
    w = torch.rand(t, TOPK, device="cuda", generator=g) + 0.1
    w = w / w.sum(-1, keepdim=True)
    ids = torch.cat([ids, torch.full((t, 1), E, device="cuda", dtype=ids.dtype)], 1)
    return ids, torch.cat([w, torch.sigmoid(torch.randn(t, 1, device="cuda", generator=g))], 1)


@pytest.fixture(scope="module")
def packed():
    ex = _random_experts(seed=1)
    return ex, load_op("moe_pack").pack_experts(*ex)


# one T per launch path (T = 1 direct, the middle bucket, the large one); T is kept off multiples of 16 pairs
# (k = 9) so that the batch-invariance sizes below reuse these compiled specialisations
@pytest.mark.parametrize("t,dist", [(1, "uniform"), (33, "uniform"), (300, "skewed")])
def test_real_shapes_match_reference(t, dist, packed):
    ex, pk = packed
    op, k = load_op("moe_fused"), load_op("moe_fused").kernels
    x = torch.randn(t, H, device="cuda").bfloat16()
    ids, w = _routing(t, seed=t, dist=dist)
    y = op.moe_w4a16(x, ids, w, pk)
    assert rel_err(y, op.moe_w4a16_ref(x, ids, w, pk)) < TOL_BF16
    assert rel_err(y, k.reference.moe_nvfp4_ref(x, ids, w, *ex)) < TOL_BF16


def test_real_shapes_batch_invariance_bitwise(packed):
    """A token's output alone (T = 1 path) equals its row inside batches of 2, 17, 33 and 300 (default buckets
    s, m, l: block heights 16 and 64, split-K 4, 2 and off), bit for bit."""
    _, pk = packed
    op = load_op("moe_fused")
    x = torch.randn(128, H, device="cuda").bfloat16()
    ids, w = _routing(128, seed=7)
    alone = op.moe_w4a16(x[:1], ids[:1], w[:1], pk)
    for n in (2, 17, 33, 300):
        if n > 128:  # the large bucket (64-row blocks): token 0 repeated among others
            sel = torch.cat([torch.arange(128, device="cuda"), torch.randint(0, 128, (n - 128,), device="cuda")])
        else:
            sel = torch.arange(n, device="cuda").flip(0)  # token 0 last
        y = op.moe_w4a16(x[sel], ids[sel], w[sel], pk)
        row = (sel == 0).nonzero()[0, 0]
        assert torch.equal(y[row], alone[0]), f"batch of {n}: max diff {(y[row].float() - alone[0].float()).abs().max()}"


def test_graph_padding_rows_touch_no_expert(packed):
    """Inside a CUDA graph captured for 8 rows, n_valid = 3: the 5 padding rows route to experts with
    NaN weights and must not read them; real rows equal the eager result of the 3 rows alone."""
    ex, _ = packed
    ex = [t.clone() for t in ex]
    ex[2][200] = float("nan")
    ex[5][200] = float("nan")
    pk = load_op("moe_pack").pack_experts(*ex)
    op = load_op("moe_fused")
    x = torch.randn(8, H, device="cuda").bfloat16()
    ids, w = _routing(8, seed=3)
    ids[:3, :TOPK] = torch.where(ids[:3, :TOPK] == 200, 0, ids[:3, :TOPK])
    ids[3:, 0] = 200
    nv = torch.tensor([8], dtype=torch.int32, device="cuda")
    op.moe_w4a16(x, ids, w, pk, nv)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = op.moe_w4a16(x, ids, w, pk, nv)
    nv.fill_(3)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.isfinite(y).all() and (y[3:] == 0).all()
    assert torch.equal(y[:3], op.moe_w4a16(x[:3], ids[:3], w[:3], pk))


def _render(tmp_path_factory, **values):
    from metainfer.render import render_engine
    from metainfer.targets import Target, get_gpu, get_model, get_quant

    out = render_engine(Target(get_model("qwen3.6-35b-a3b-tiny"), get_quant("nvfp4"), get_gpu("h200")),
                        tmp_path_factory.mktemp("gen"))
    path = out / "engine" / "tunables.json"
    data = json.loads(path.read_text())
    data["values"].update(values)
    path.write_text(json.dumps(data, indent=2))
    return out


def test_greedy_tokens_same_alone_and_in_batches(tmp_path_factory, tiny_checkpoint):
    """The tiny engine on the GPU with the new MoE op at every T (``moe_ops_min_tokens`` 1; the default 16
    sends small batches to the old kernels, whose rounding differs; graphs up to 33): a prompt's greedy
    tokens alone equal its tokens inside batches of 2, 17 and 33."""
    from harness.engine_loader import import_engine

    mod = import_engine(_render(tmp_path_factory, moe_ops=1, moe_ops_min_tokens=1))
    engine = mod.load(str(tiny_checkpoint("nvfp4")), device="cuda", max_batch=33, max_seq_len=256)
    assert engine.graphs is not None and engine.graphs.sizes[-1] == 33
    g = torch.Generator().manual_seed(21)
    prompts = [torch.randint(0, 1000, (int(n),), generator=g).tolist() for n in torch.randint(3, 90, (33,), generator=g)]
    params = mod.SamplingParams(max_tokens=16, ignore_eos=True)
    alone = engine.generate([prompts[0]], params)[0]
    for n in (2, 17, 33):
        batched = engine.generate(prompts[:n], params)[0]
        assert batched == alone, f"batch of {n}: {batched} vs alone {alone}"

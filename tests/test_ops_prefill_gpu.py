"""The prefill ops on CUDA at the real shapes, and the prefill forward's host syncs and launches.

- Each op against its reference at Qwen3.6-35B-A3B's shapes (GDN HK 16, HV 32, 128 dims; attention
  16 q / 2 kv heads, head_dim 256; conv1d 8192 channels), lengths 1, 63, 64, 65, 1000 in one batch,
  continuing sequences. The GDN kernel's fp32 dots run on tf32 tensor cores by default (10-bit
  mantissa, 2^-11 relative per input; a torch emulation of the kernel's tf32 dots over 1,000 tokens
  differed from fp32 by 4.4e-4 in o and 4.0e-4 in the state): output within TOL_BF16, state within
  3e-3 there, 1e-4 with ``dot_precision="ieee"``.
- No host sync: ``torch.cuda.set_sync_debug_mode("error")`` around the ops and around a whole
  prefill forward of the tiny NVFP4 engine (batch built before; the MoE must be sync-free too).
- Launch count of a 256-token prefill forward (torch.profiler): the prefill ops issue exactly
  4 kernels per GDN layer and 1 per attention layer; the total is printed and bounded by 20 a layer
  (issue 11 aims at ~600 for 40 layers with CUDA graphs).
Marked ``gpu``; skipped without CUDA.
"""

from __future__ import annotations

from test_kernels_common import TOL_BF16, TOL_BF16_TWICE, rel_err  # noqa: I001
from test_ops_prefill_common import load_op

import importlib
import json

import pytest
import torch

from test_ops_prefill_attention import attn_inputs
from test_ops_prefill_conv1d import conv_inputs
from test_ops_prefill_gdn import gdn_inputs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

LENS = [1, 63, 64, 65, 1000]
PREFILL_KERNELS = ("_gdn_prep_kernel", "_gdn_state_kernel", "_gdn_output_kernel", "_conv1d_prefill_kernel", "_attn_prefill_kernel")


@pytest.mark.parametrize("precision,tol_o,tol_s", [(None, TOL_BF16, 3e-3), ("ieee", TOL_BF16, 1e-4)])
def test_gdn_chunk_real_shapes(precision, tol_o, tol_s):
    op = load_op("gdn_chunk")
    d = gdn_inputs(LENS, 16, 32, 128, 128, seed=11, device="cuda")
    args = [d[n] for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias")]
    state, state_ref = d["state"].clone(), d["state"].clone()
    o = op.gdn_chunk_prefill(*args, state, d["cu"], d["slots"], dot_precision=precision)
    o_ref = op.gdn_chunk_prefill_ref(*args, state_ref, d["cu"], d["slots"])
    used = d["slots"].long()
    assert rel_err(o, o_ref) < tol_o
    assert rel_err(state[used], state_ref[used]) < tol_s
    assert torch.equal(state.isnan(), state_ref.isnan())


def test_attention_prefill_real_shapes():
    op = load_op("attention_prefill")
    d = attn_inputs(LENS, [0, 100, 0, 7, 0], 16, 2, 256, max_len=1200, seed=3, device="cuda")
    args = (d["q"], d["kc"], d["vc"], d["gate"], d["cu"], d["positions"], d["slots"], 256**-0.5)
    assert rel_err(op.attention_prefill(*args), op.attention_prefill_ref(*args)) < TOL_BF16_TWICE


def test_conv1d_prefill_real_shapes():
    op = load_op("conv1d_prefill")
    x, w, state, cu, slots = conv_inputs(LENS, c=8192, seed=2, device="cuda")
    state_ref = state.clone()
    y = op.causal_conv1d_prefill(x, state, w, cu, slots)
    assert rel_err(y, op.causal_conv1d_prefill_ref(x, state_ref, w, cu, slots)) < TOL_BF16
    assert torch.equal(state[slots.long()], state_ref[slots.long()])


def test_prefill_ops_do_not_sync():
    gdn, attn, conv = load_op("gdn_chunk"), load_op("attention_prefill"), load_op("conv1d_prefill")
    d = gdn_inputs(LENS, 16, 32, 128, 128, seed=1, device="cuda")
    a = attn_inputs(LENS, [0, 100, 0, 7, 0], 16, 2, 256, max_len=1200, seed=1, device="cuda")
    x, w, cs, cu, slots = conv_inputs(LENS, c=8192, seed=1, device="cuda")
    for _ in range(2):  # the first round compiles
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            gdn.gdn_chunk_prefill(*[d[n] for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "state", "cu", "slots")])
            attn.attention_prefill(a["q"], a["kc"], a["vc"], a["gate"], a["cu"], a["positions"], a["slots"], 0.0625)
            conv.causal_conv1d_prefill(x, cs, w, cu, slots)
        finally:
            torch.cuda.set_sync_debug_mode("default")


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory, tiny_checkpoint):
    from harness.engine_loader import import_engine
    from metainfer.render import render_engine
    from metainfer.targets import Target, get_gpu, get_model, get_quant

    out = render_engine(Target(get_model("qwen3.6-35b-a3b-tiny"), get_quant("nvfp4"), get_gpu("h200")), tmp_path_factory.mktemp("gen"))
    values = json.loads((out / "engine" / "tunables.json").read_text())["values"]
    assert values["gdn_prefill_ops"] == values["attention_prefill_ops"] == values["conv1d_prefill_ops"] == 1
    mod = import_engine(out)
    engine = mod.load(str(tiny_checkpoint("nvfp4")), device="cuda", max_batch=4, max_seq_len=512)
    return mod, engine


def _prefill_batch(mod, engine, n, seed):
    make_batch = importlib.import_module(f"{mod.__name__}.batch").make_batch
    toks = torch.randint(0, 1000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    slot = engine.cache.allocate(1)
    return make_batch([toks], slot, [0], engine.device), slot


def test_prefill_forward_does_not_sync(tiny_engine):
    mod, engine = tiny_engine
    for i in range(2):  # the first forward compiles and autotunes
        batch, slot = _prefill_batch(mod, engine, 300, seed=i)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = engine.model.forward(batch, engine.cache)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.isfinite(out.logits).all()
        engine.cache.release(slot)


def test_prefill_forward_launch_count(tiny_engine):
    from torch.profiler import ProfilerActivity, profile

    mod, engine = tiny_engine
    batch, slot = _prefill_batch(mod, engine, 256, seed=7)
    engine.model.forward(batch, engine.cache)  # warm
    engine.cache.release(slot)
    batch, slot = _prefill_batch(mod, engine, 256, seed=8)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.model.forward(batch, engine.cache)
        torch.cuda.synchronize()
    engine.cache.release(slot)
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.startswith(("Memcpy", "Memset"))]
    dims = engine.dims
    n_gdn, n_attn = len(dims.linear_attention_layers), len(dims.full_attention_layers)
    ours = sum(1 for k in kernels if k.startswith(PREFILL_KERNELS))
    print(f"256-token prefill forward: {len(kernels)} kernels for {n_gdn + n_attn} layers "
          f"({len(kernels) / (n_gdn + n_attn):.1f} a layer), prefill ops {ours}")
    assert ours == 4 * n_gdn + n_attn
    assert len(kernels) <= 20 * (n_gdn + n_attn) + 20

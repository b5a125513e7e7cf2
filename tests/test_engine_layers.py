"""Each mixer and the MoE block of the rendered engine against the matching HF module, alone.

The whole-model comparison (``test_engine_cpu``) measures a layer's output including the
residual stream, where a wrong attention (for instance a RoPE slip) hides under 1 %. Here
each component gets the same input as its HF twin (HF in fp32, ours in bf16) and its own
output is compared: bf16 noise is ~0.5 % per token, so 2 % median / 5 % worst token catches
real mistakes. A continuation check (two pieces, then a decode step) runs the cache paths.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from test_engine_support import rel_rows, render_tiny


@pytest.fixture(scope="module", params=["bf16", "nvfp4"])
def setup(request, tmp_path_factory, tiny_checkpoint):
    from metainfer.checkpoint import CheckpointReader
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    quant = request.param
    mod = render_tiny(quant, tmp_path_factory.mktemp(f"gen-{quant}"))
    eng = mod.load(tiny_checkpoint(quant), "cpu", max_batch=2, max_seq_len=128)
    reader = CheckpointReader(tiny_checkpoint(quant))
    hf = Qwen3_5MoeForCausalLM(Qwen3_5MoeTextConfig(**reader.text_config)).float().eval()
    hf.load_state_dict(reader.hf_state_dict(torch.float32), strict=True)
    sub = {n: importlib.import_module(f"{mod.__name__}.{n}") for n in ("attention", "batch", "gdn", "moe")}
    return eng, hf, sub


def _x(t: int, h: int, seed: int) -> torch.Tensor:
    return torch.randn(t, h, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


def _assert_close(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert torch.isfinite(ours).all(), f"{what}: non-finite output"
    assert ref.abs().max() > 0, f"{what}: trivial reference"
    err = rel_rows(ours, ref)
    assert err.median() < 2e-2 and err.max() < 5e-2, f"{what}: median {err.median():.3g}, worst {err.max():.3g} at {int(err.argmax())}"


def _causal(t: int) -> torch.Tensor:
    return torch.full((t, t), float("-inf")).triu(1)[None, None]


def _run_pieces(eng, sub, fn, x: torch.Tensor, pieces: list[int]) -> torch.Tensor:
    """Run ``fn(x_piece, batch)`` over consecutive pieces of one sequence (a piece of 1 after
    the first runs as a decode step); returns the outputs concatenated."""
    slot = eng.cache.allocate(1)
    outs, at = [], 0
    try:
        for i, n in enumerate(pieces):
            eng.cache.reserve([(slot[0], at + n)])  # KV blocks (paged cache) before the layer writes them
            b = sub["batch"].make_batch([[0] * n], slot, [at], eng.device, decode=(n == 1 and i > 0))
            outs.append(fn(x[at : at + n], b))
            at += n
    finally:
        eng.cache.release(slot)
    return torch.cat(outs)


@pytest.mark.parametrize("pieces", [[40], [17, 22, 1]])
def test_attention_matches_hf(setup, pieces):
    eng, hf, sub = setup
    i = eng.dims.full_attention_layers[0]
    x = _x(sum(pieces), eng.dims.hidden_size, seed=1)
    rope = sub["attention"].Rope(eng.dims, eng.device)
    w = eng.model.w.layers[i].attn
    ours = _run_pieces(eng, sub, lambda xp, b: sub["attention"].attention_forward(xp, w, i, b, eng.cache, rope.cos_sin(b.positions), eng.dims), x, pieces)
    pos = torch.arange(x.shape[0])[None]
    with torch.no_grad():
        emb = hf.model.rotary_emb(x[None].float(), pos)
        ref, _ = hf.model.layers[i].self_attn(x[None].float(), position_embeddings=emb, attention_mask=_causal(x.shape[0]))
    _assert_close(ours, ref[0], f"attention layer {i}, pieces {pieces}")


@pytest.mark.parametrize("pieces", [[40], [17, 22, 1]])
def test_gated_deltanet_matches_hf(setup, pieces):
    eng, hf, sub = setup
    i = eng.dims.linear_attention_layers[1]
    x = _x(sum(pieces), eng.dims.hidden_size, seed=2)
    w = eng.model.w.layers[i].gdn
    ours = _run_pieces(eng, sub, lambda xp, b: sub["gdn"].gdn_forward(xp, w, i, b, eng.cache, eng.dims, eng.tunables), x, pieces)
    with torch.no_grad():
        ref = hf.model.layers[i].linear_attn(x[None].float())
    _assert_close(ours, ref[0], f"gated deltanet layer {i}, pieces {pieces}")


def test_moe_matches_hf(setup):
    eng, hf, sub = setup
    i = 2
    x = _x(64, eng.dims.hidden_size, seed=3)
    ours = sub["moe"].moe_forward(x, eng.model.w.layers[i].moe, eng.dims, eng.model.launch)
    with torch.no_grad():
        ref = hf.model.layers[i].mlp(x[None].float())[0]
    # a router near-tie may pick another expert for a token in bf16; allow two such tokens
    err = rel_rows(ours, ref)
    assert torch.isfinite(ours).all() and ref.abs().max() > 0
    assert err.median() < 2e-2 and (err > 5e-2).sum() <= 2, f"moe layer {i}: median {err.median():.3g}, worst {err.max():.3g}"


def test_stacked_shared_expert_matches_separate_one(setup):
    """NVFP4: the shared expert run as expert E of the stack (one router GEMV, k+1 pairs in the MoE
    kernels, one fp32 sum) equals the separate shared-expert path (own GEMVs, bf16 sigmoid gate,
    bf16 add) up to bf16 rounding."""
    eng, _, sub = setup
    moe = eng.model.w.layers[1].moe
    if not moe.experts.quantized:
        assert not moe.shared_stacked
        return
    assert moe.shared_stacked and moe.experts.w13.shape[0] == eng.dims.num_experts + 1
    ex = moe.experts
    routed = type(ex)(ex.w13[:-1], ex.w2[:-1], ex.s13[:-1], ex.g13[:-1], ex.s2[:-1], ex.g2[:-1])
    lin = type(eng.model.w.layers[0].gdn.in_proj)
    separate = type(moe)(
        router=moe.router[:-1], experts=routed, shared_expert_gate=moe.router[-1:],
        shared_gate=lin(ex.w13[-1, : ex.w13.shape[1] // 2], ex.s13[-1, : ex.w13.shape[1] // 2], ex.g13[-1, 0]),
        shared_up=lin(ex.w13[-1, ex.w13.shape[1] // 2 :], ex.s13[-1, ex.w13.shape[1] // 2 :], ex.g13[-1, 1]),
        shared_down=lin(ex.w2[-1], ex.s2[-1], ex.g2[-1]),
    )
    x = _x(9, eng.dims.hidden_size, seed=5)
    a = sub["moe"].moe_forward(x, moe, eng.dims, eng.model.launch)
    b = sub["moe"].moe_forward(x, separate, eng.dims, eng.model.launch)
    err = rel_rows(a, b)
    assert torch.isfinite(a).all() and err.max() < 1e-2, f"stacked vs separate shared expert: worst row {err.max():.3g}"

"""Synthetic checkpoints: exact layout, index consistency, reader formats and errors, HF loading."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from metainfer.checkpoint import CheckpointReader, NvFp4Linear, expected_tensors, write_checkpoint
from metainfer.errors import CheckpointError
from metainfer.formats.nvfp4 import dequantize
from metainfer.targets import get_model, get_quant

from conftest import TINY_MODEL, TINY_SEED

_DT = {"BF16": torch.bfloat16, "U8": torch.uint8, "F8_E4M3": torch.float8_e4m3fn, "F32": torch.float32}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit(ckpt: Path, fn) -> None:
    """Apply ``fn(tensors dict)`` to the shard holding layer 0's input norm and fix the index."""
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    shard = index["weight_map"]["model.language_model.layers.0.input_layernorm.weight"]
    tensors = load_file(ckpt / shard)
    fn(tensors)
    save_file(tensors, ckpt / shard, metadata={"format": "pt"})
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard} | {k: shard for k in tensors}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("quant", ["bf16", "nvfp4"])
def test_layout_exactly_as_expected_and_index_consistent(tiny_checkpoint, quant):
    ckpt = tiny_checkpoint(quant)
    want = expected_tensors(get_model(TINY_MODEL), get_quant(quant))
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(want)
    shards = sorted(p.name for p in ckpt.glob("*.safetensors"))
    assert shards == sorted(set(index["weight_map"].values())) and len(shards) > 1
    total = 0
    for shard in shards:
        with safe_open(str(ckpt / shard), framework="pt") as h:
            assert {k for k, v in index["weight_map"].items() if v == shard} == set(h.keys())
            for name in h.keys():
                sl = h.get_slice(name)
                assert (tuple(sl.get_shape()), _DT[sl.get_dtype()]) == (want[name].shape, want[name].dtype), name
                total += math.prod(sl.get_shape()) * want[name].dtype.itemsize
    assert index["metadata"]["total_size"] == total
    assert not any(n.startswith("model.visual.") for n in want)
    assert "mtp.fc.weight" in want and "lm_head.weight" in want
    CheckpointReader(ckpt).validate()


def test_nvfp4_configs(tiny_checkpoint):
    ckpt = tiny_checkpoint("nvfp4")
    qc = json.loads((ckpt / "config.json").read_text())["quantization_config"]
    legacy = json.loads((ckpt / "hf_quant_config.json").read_text())["quantization"]
    assert (qc["quant_method"], qc["quant_algo"], qc["group_size"]) == ("modelopt", "NVFP4", 16)
    assert legacy["quant_algo"] == "NVFP4" and legacy["exclude_modules"] == qc["ignore"] and "lm_head" in qc["ignore"]
    assert "quantization_config" not in json.loads((tiny_checkpoint("bf16") / "config.json").read_text())
    assert not (tiny_checkpoint("bf16") / "hf_quant_config.json").exists()


def test_full_size_layout_shapes_and_bytes():
    model = get_model("qwen3.6-35b-a3b")
    bf16, fp4 = expected_tensors(model, get_quant("bf16")), expected_tensors(model, get_quant("nvfp4"))
    p = "model.language_model.layers."
    assert bf16[p + "3.self_attn.q_proj.weight"].shape == (8192, 2048)
    assert bf16[p + "0.linear_attn.in_proj_qkv.weight"].shape == (8192, 2048)
    assert bf16[p + "0.linear_attn.conv1d.weight"].shape == (8192, 1, 4)
    assert bf16[p + "0.mlp.experts.gate_up_proj"].shape == (256, 1024, 2048)
    assert bf16[p + "0.mlp.experts.down_proj"].shape == (256, 2048, 512)
    assert fp4[p + "39.mlp.experts.255.down_proj.weight"].shape == (2048, 256)
    assert fp4[p + "39.mlp.experts.255.down_proj.weight_scale"].shape == (2048, 32)
    nbytes = lambda d: sum(math.prod(s.shape) * s.dtype.itemsize for s in d.values()) / 1e9  # noqa: E731
    assert 69 < nbytes(bf16) < 73 and 23 < nbytes(fp4) < 26


def test_reader_get_linear_and_experts(tiny_checkpoint):
    t = get_model(TINY_MODEL).text
    e, i, h = t["num_experts"], t["moe_intermediate_size"], t["hidden_size"]
    bf, fp = CheckpointReader(tiny_checkpoint("bf16")), CheckpointReader(tiny_checkpoint("nvfp4"))
    assert (bf.quant, bf.convention, fp.quant, fp.convention) == ("bf16", None, "nvfp4", "modelopt")
    assert bf.get("embed_tokens.weight").shape == (t["vocab_size"], h) and bf.get("lm_head.weight").dtype == torch.bfloat16
    lin = fp.get_linear("layers.1.mlp.shared_expert.gate_proj")
    assert isinstance(lin, NvFp4Linear) and lin.shape == (t["shared_expert_intermediate_size"], h)
    dense = bf.get_linear("layers.1.mlp.shared_expert.gate_proj").weight.float()
    assert (lin.dense() - dense).norm() / dense.norm() < 0.15  # NVFP4 = quantize(the bf16 weight)
    assert torch.equal(fp.get_linear("layers.3.self_attn.q_proj").weight, bf.get_linear("layers.3.self_attn.q_proj").weight)
    ex_bf, ex_fp = bf.get_experts(2), fp.get_experts(2)
    assert ex_bf.gate_up.shape == (e, 2 * i, h) and ex_bf.down.shape == (e, h, i)
    assert len(ex_fp.gate) == len(ex_fp.up) == len(ex_fp.down) == e
    # gate and up of one expert share one global scale (as ModelOpt exports them); down has its own
    assert all(torch.equal(u.weight_scale_2, g.weight_scale_2) for g, u in zip(ex_fp.gate, ex_fp.up))
    assert not all(torch.equal(d.weight_scale_2, g.weight_scale_2) for g, d in zip(ex_fp.gate, ex_fp.down))
    sg, su = (fp.get_linear(f"layers.1.mlp.shared_expert.{x}_proj") for x in ("gate", "up"))
    assert torch.equal(sg.weight_scale_2, su.weight_scale_2)
    gate_up, down = ex_fp.fused_dense()
    assert torch.equal(gate_up[5, i:], dequantize(ex_fp.up[5].weight, ex_fp.up[5].weight_scale, ex_fp.up[5].weight_scale_2))
    assert (gate_up - ex_bf.gate_up.float()).norm() / ex_bf.gate_up.float().norm() < 0.15
    assert (down - ex_bf.down.float()).norm() / ex_bf.down.float().norm() < 0.15
    with pytest.raises(CheckpointError, match="layers.99.mlp.gate.weight"):
        bf.get("layers.99.mlp.gate.weight")


def test_weights_have_real_scale_and_skewed_router(tiny_checkpoint):
    r = CheckpointReader(tiny_checkpoint("bf16"))
    norm = r.get("layers.0.input_layernorm.weight").float()  # zero-centred: 1 + w log-normal, far from 1
    assert (norm > -1).all() and 0.3 < (1 + norm).log().std() < 0.7
    q, k = (r.get(f"layers.3.self_attn.{x}_norm.weight").float() for x in ("q", "k"))
    assert (q - k).abs().mean() > 0.3  # distinct per channel: a swap shows
    dt_bias = r.get("layers.0.linear_attn.dt_bias").float()  # [HV]
    dt = torch.nn.functional.softplus(dt_bias)
    assert (dt[0::2] >= 0.9e-4).all() and (dt[0::2] <= 0.11).all()  # even heads: slow to fast decays
    a_log = r.get("layers.0.linear_attn.A_log").float()
    assert ((a_log[0::2] >= 0) & (a_log[0::2] <= math.log(16) + 1e-2)).all()
    # odd heads in softplus's bend: a + dt_bias on both sides of 0 (exp(x) for softplus(x) is up to 2x off there),
    # with a small A, so the decay per token keeps memory and a wrong one shows
    assert (dt_bias[1::2].abs() <= 1.01).all() and (dt_bias[1::2] - dt_bias[0::2]).min() > 1.0
    assert ((a_log[1::2].exp() >= 0.049) & (a_log[1::2].exp() <= 0.51)).all()
    row_norms = r.get("layers.0.mlp.gate.weight").float().norm(dim=1)
    assert row_norms.max() / row_norms.min() > 2.0


def test_residual_output_projections_use_scaled_init(tiny_checkpoint):
    """o_proj, GDN out_proj, experts' and shared expert's down_proj: std 1/sqrt(fan_in) / sqrt(2 L)."""
    bf, fp = CheckpointReader(tiny_checkpoint("bf16")), CheckpointReader(tiny_checkpoint("nvfp4"))
    layers = bf.text_config["num_hidden_layers"]
    scaled = {
        "layers.3.self_attn.o_proj.weight": bf.get("layers.3.self_attn.o_proj.weight"),
        "layers.0.linear_attn.out_proj.weight": bf.get("layers.0.linear_attn.out_proj.weight"),
        "layers.5.mlp.shared_expert.down_proj.weight": bf.get("layers.5.mlp.shared_expert.down_proj.weight"),
        "layers.2.mlp.experts.down_proj": bf.get_experts(2).down,  # [E, H, I]
    }
    for name, w in scaled.items():
        w = w.float()
        expect = 1 / math.sqrt(w.shape[-1]) / math.sqrt(2 * layers)
        assert 0.9 < float(w.std()) / expect < 1.1, name
    for name in ("layers.4.linear_attn.in_proj_z.weight", "layers.0.linear_attn.in_proj_qkv.weight"):
        w = bf.get(name).float()
        assert 0.9 < float(w.std()) * math.sqrt(w.shape[-1]) < 1.1, name  # other linears unscaled
    w = bf.get("layers.3.self_attn.q_proj.weight").float()  # [q | gate]: 3x wider, so the gate is far from constant
    assert 2.7 < float(w.std()) * math.sqrt(w.shape[-1]) < 3.3
    # NVFP4 = quantize(the same bf16 weights): the scaled down_proj of both checkpoints agree
    dense = bf.get_linear("layers.5.mlp.shared_expert.down_proj").weight.float()
    quant = fp.get_linear("layers.5.mlp.shared_expert.down_proj").dense()
    assert (quant - dense).norm() / dense.norm() < 0.15
    assert torch.equal(fp.get("layers.3.self_attn.o_proj.weight"), bf.get("layers.3.self_attn.o_proj.weight"))


def test_scaled_init_needs_the_layer_count():
    from metainfer.checkpoint.init import init_dense, init_expert, residual_out_scale

    assert residual_out_scale(8) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="num_hidden_layers"):
        init_dense("layers.0.self_attn.o_proj.weight", (4, 16), "linear_out", 0)
    with pytest.raises(ValueError, match="num_hidden_layers"):
        init_expert("layers.0.mlp.experts", 0, "down_proj", (4, 16), 0, 0)
    a = init_dense("w", (64, 256), "linear_out", 0, 8)
    b = init_dense("w", (64, 256), "linear", 0)
    assert torch.allclose(a, b * 0.25)  # same draw, scaled: the seed-by-name rule holds


def test_writer_is_seeded_by_name(tmp_path):
    model, quant = get_model(TINY_MODEL), get_quant("bf16")
    a = CheckpointReader(write_checkpoint(model, quant, tmp_path / "a", 7, progress=False, shard_bytes=10**9))
    b = CheckpointReader(write_checkpoint(model, quant, tmp_path / "b", 7, progress=False))
    c = CheckpointReader(write_checkpoint(model, quant, tmp_path / "c", 8, progress=False))
    assert len(list((tmp_path / "a").glob("*.safetensors"))) == 1
    for name in ("layers.4.linear_attn.in_proj_qkv.weight", "layers.0.mlp.experts.gate_up_proj"):
        assert torch.equal(a.get(name), b.get(name)) and not torch.equal(a.get(name), c.get(name))


def test_refuses_non_empty_folder_unless_forced(tmp_path):
    (tmp_path / "note.txt").write_text("keep")
    model, quant = get_model(TINY_MODEL), get_quant("bf16")
    with pytest.raises(CheckpointError, match="--force"):
        write_checkpoint(model, quant, tmp_path, 0, progress=False)
    write_checkpoint(model, quant, tmp_path, 0, progress=False, force=True)
    assert (tmp_path / "note.txt").read_text() == "keep" and (tmp_path / "config.json").exists()


@pytest.mark.parametrize("how, name", [
    ("missing", "model.language_model.layers.0.input_layernorm.weight"),
    ("extra", "model.language_model.layers.0.mlp.bogus.weight"),
    ("shape", "model.language_model.layers.0.input_layernorm.weight"),
])
def test_validate_names_the_bad_tensor(tiny_checkpoint, tmp_path, how, name):
    ckpt = _copy(tiny_checkpoint("bf16"), tmp_path / "ck")

    def edit(t):
        if how == "missing":
            del t[name]
        elif how == "extra":
            t[name] = torch.randn(4, 4)
        else:
            t[name] = torch.randn(t[name].shape[0] + 16).to(torch.bfloat16)

    _edit(ckpt, edit)
    with pytest.raises(CheckpointError, match=f"{how if how != 'shape' else 'mis-shaped'}.*{name.removeprefix('model.language_model.')}"):
        CheckpointReader(ckpt).validate()


def test_compressed_tensors_convention_reads_as_modelopt(tmp_path, tiny_checkpoint):
    model = get_model(TINY_MODEL)
    ct = CheckpointReader(write_checkpoint(model, get_quant("nvfp4"), tmp_path, TINY_SEED, progress=False, convention="compressed-tensors"))
    mo = CheckpointReader(tiny_checkpoint("nvfp4"))
    assert ct.convention == "compressed-tensors" and ct.has("layers.0.mlp.experts.3.up_proj.weight_global_scale")
    ct.validate()
    for module in ("layers.0.mlp.experts.3.up_proj", "layers.5.mlp.shared_expert.down_proj"):
        a, b = ct.get_linear(module), mo.get_linear(module)
        assert torch.equal(a.weight, b.weight) and torch.equal(a.weight_scale.view(torch.uint8), b.weight_scale.view(torch.uint8))
        torch.testing.assert_close(a.weight_scale_2, b.weight_scale_2, rtol=1e-6, atol=0)
    sa, sb = ct.hf_state_dict(torch.float32), mo.hf_state_dict(torch.float32)
    for k in sb:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-5, atol=0)


def test_cli_writes_and_refuses(tmp_path):
    from typer.testing import CliRunner

    from metainfer.cli import app

    args = ["checkpoint", "--model", TINY_MODEL, "--quant", "nvfp4", "--out", str(tmp_path), "--seed", "3"]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert CheckpointReader(tmp_path).quant == "nvfp4"
    again = CliRunner().invoke(app, args)
    assert again.exit_code != 0 and "--force" in str(again.exception)


def test_transformers_loads_the_bf16_checkpoint(tiny_checkpoint, tmp_path):
    from transformers import Qwen3_5MoeForCausalLM

    ckpt = tiny_checkpoint("bf16")
    hf = Qwen3_5MoeForCausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)
    ours = CheckpointReader(ckpt).hf_state_dict(torch.bfloat16)
    theirs = hf.state_dict()
    assert set(theirs) == set(ours)
    for k, v in ours.items():
        assert torch.equal(theirs[k], v), k
    # and the reader reads what transformers itself saves (text-only names, prefix ``model.``)
    hf.save_pretrained(tmp_path)
    back = CheckpointReader(tmp_path)
    back.validate()
    again = back.hf_state_dict(torch.bfloat16)
    assert all(torch.equal(again[k], v) for k, v in ours.items())
    ids = torch.tensor([[1, 5, 9, 300, 2]])
    logits = hf(ids).logits.float()
    assert torch.isfinite(logits).all() and logits.std() > 0.1


def test_qwen35_keeps_gdn_a_log_and_norm_in_fp32(tmp_path):
    r = CheckpointReader(write_checkpoint(get_model("qwen3.5-35b-a3b-tiny"), get_quant("bf16"), tmp_path, 0, progress=False))
    r.validate()
    assert r.get("layers.0.linear_attn.A_log").dtype == torch.float32
    assert r.get("layers.0.linear_attn.norm.weight").dtype == torch.float32
    assert r.get("layers.0.linear_attn.dt_bias").dtype == torch.bfloat16
    assert r.config["text_config"]["bos_token_id"] is None


@pytest.mark.parametrize("per_row", [False, True])
def test_fp8_attention_of_a_mixed_checkpoint_reads_as_bf16(tiny_checkpoint, tmp_path, per_row):
    ckpt = _copy(tiny_checkpoint("nvfp4"), tmp_path / "ck")
    module = "model.language_model.layers.3.self_attn.o_proj"
    original = CheckpointReader(ckpt).get_linear("layers.3.self_attn.o_proj").weight.float()

    def to_fp8(t):
        w = t.pop(f"{module}.weight", None)
        if w is None:  # another shard: move it here
            w = CheckpointReader(ckpt).get("layers.3.self_attn.o_proj.weight")
        w = w.float()
        scale = (w.abs().amax(dim=1, keepdim=True) if per_row else w.abs().max()) / 448
        t[f"{module}.weight"] = (w / scale).to(torch.float8_e4m3fn)
        t[f"{module}.weight_scale"] = scale
        t[f"{module}.input_scale"] = torch.tensor(0.01)

    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    owner = index["weight_map"][f"{module}.weight"]
    tensors = load_file(ckpt / owner)
    to_fp8(tensors)
    save_file(tensors, ckpt / owner, metadata={"format": "pt"})
    index["weight_map"].update({k: owner for k in tensors})
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    r = CheckpointReader(ckpt)
    r.validate()
    lin = r.get_linear("layers.3.self_attn.o_proj")
    assert lin.weight.dtype == torch.bfloat16 and torch.isfinite(lin.weight.float()).all()
    assert (lin.weight.float() - original).norm() / original.norm() < 0.06


def test_unfused_bf16_experts_read_like_fused(tiny_checkpoint, tmp_path):
    model = get_model(TINY_MODEL)
    unfused = CheckpointReader(write_checkpoint(model, get_quant("bf16"), tmp_path, TINY_SEED, progress=False, fused_experts=False))
    fused = CheckpointReader(tiny_checkpoint("bf16"))
    assert not unfused.fused_experts and unfused.has("layers.2.mlp.experts.15.down_proj.weight")
    unfused.validate()
    a, b = unfused.get_experts(2), fused.get_experts(2)
    assert torch.equal(a.gate_up, b.gate_up) and torch.equal(a.down, b.down)
    sa, sb = unfused.hf_state_dict(torch.bfloat16), fused.hf_state_dict(torch.bfloat16)
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sb)


def test_reader_refuses_broken_folders(tiny_checkpoint, tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        CheckpointReader(tmp_path)
    ckpt = _copy(tiny_checkpoint("bf16"), tmp_path / "ck")
    (ckpt / "model-00002-of-00005.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00005.safetensors"):
        CheckpointReader(ckpt)
    gptq = _copy(tiny_checkpoint("bf16"), tmp_path / "gptq")
    config = json.loads((gptq / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (gptq / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="unsupported quantization_config.*gptq"):
        CheckpointReader(gptq)


def test_damaged_checkpoints_are_named_errors_not_tracebacks(tiny_checkpoint, tmp_path):
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    from metainfer.checkpoint import CheckpointReader
    from metainfer.errors import CheckpointError

    src = tiny_checkpoint("bf16")
    bad_json, dropped, truncated = (tmp_path / n for n in ("json", "dropped", "truncated"))
    for d in (bad_json, dropped, truncated):
        shutil.copytree(src, d)
    (bad_json / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json: not valid JSON"):
        CheckpointReader(bad_json)
    index = json.loads((dropped / "model.safetensors.index.json").read_text())["weight_map"]
    name, shard = next(iter(index.items()))
    tensors = load_file(dropped / shard)
    del tensors[name]
    save_file(tensors, dropped / shard)  # the index still places `name` there
    with pytest.raises(CheckpointError, match="not in it"):
        CheckpointReader(dropped)
    shard_path = truncated / shard
    shard_path.write_bytes(shard_path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="truncated or damaged"):
        CheckpointReader(truncated)

"""Model facts: what a template reads, their digest, models by path, the engine's refusal and the checkpoint cache key."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from metainfer.checkpoint.facts import diff_facts, family_of
from metainfer.errors import UnknownNameError
from metainfer.targets import get_model, get_quant, make_target
from metainfer.upgrade.facts_diff import classify

BF16, NVFP4 = get_quant("bf16"), get_quant("nvfp4")


def _write(folder, config):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_qwen35_and_qwen36_share_facts_but_not_a_cached_checkpoint():
    from metainfer.build.session import checkpoint_key

    a, b = get_model("qwen3.5-35b-a3b-tiny"), get_model("qwen3.6-35b-a3b-tiny")
    assert a.config != b.config  # bos_token_id and the GDN dtype differ; no template reads them
    assert a.facts(BF16).digest == b.facts(BF16).digest and classify(a.facts(BF16), b.facts(BF16)).cls == "none"
    assert checkpoint_key(a.name, "bf16", 0) != checkpoint_key(b.name, "bf16", 0)
    assert checkpoint_key(b.name, "bf16", 0) == checkpoint_key(b.name, "bf16", 0)
    assert checkpoint_key(b.name, "bf16", 0).startswith(b.facts(BF16).digest)
    f = b.facts(NVFP4)
    assert f.quantized == (("mlp.experts", "nvfp4"), ("mlp.shared_expert", "nvfp4")) and f.digest != b.facts(BF16).digest


def test_a_config_change_under_the_same_name_is_another_model(tmp_path):
    from metainfer.build.session import checkpoint_key

    cfg = copy.deepcopy(get_model("qwen3.6-35b-a3b-tiny").config)
    cfg["text_config"]["rope_parameters"]["rope_theta"] = 5e6
    folder = _write(tmp_path / "qwen3.6-35b-a3b-tiny", cfg)
    m = get_model(str(folder))
    reg = get_model("qwen3.6-35b-a3b-tiny")
    assert m.name == f"qwen3.6-35b-a3b-tiny-f{m.facts(BF16).digest[:8]}" and m.source == str(folder / "config.json")
    assert [c.field for c in diff_facts(reg.facts(BF16), m.facts(BF16))] == ["rope_theta"]
    assert checkpoint_key(m.source, "bf16", 0) != checkpoint_key(reg.name, "bf16", 0)
    same = _write(tmp_path / "again" / "qwen3.6-35b-a3b-tiny", reg.config)  # identical config: the registry's name
    assert get_model(str(same / "config.json")).name == "qwen3.6-35b-a3b-tiny"
    assert make_target(str(folder), "bf16", "cpu").name == f"{m.name}-bf16-cpu"


def test_unknown_family_and_bad_paths_are_refused(tmp_path):
    with pytest.raises(UnknownNameError, match=r"LlamaForCausalLM.*known families: qwen3_5_moe \(architectures Qwen3_5Moe"):
        family_of({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    _write(tmp_path / "llama", {"architectures": ["LlamaForCausalLM"], "model_type": "llama"})
    with pytest.raises(UnknownNameError, match="qwen3_5_moe"):
        get_model(str(tmp_path / "llama"))
    with pytest.raises(UnknownNameError, match="known models: .*qwen3.6-35b-a3b-tiny.*HF model folder"):
        get_model(str(tmp_path / "nowhere"))
    assert family_of({"model_type": "qwen3_5_moe_text"}) == "qwen3_5_moe"  # a text-only config


def test_classes_of_changes():
    base = get_model("qwen3.6-35b-a3b-tiny")
    cfg = copy.deepcopy(base.config)
    t = cfg["text_config"]
    t.update(eos_token_id=999, num_experts=32)
    t["layer_types"] = t["layer_types"][:4] + ["sliding_attention"] + t["layer_types"][5:]
    t["hidden_act"] = "gelu"
    from metainfer.checkpoint.facts import model_facts

    fd = classify(base.facts(BF16), model_facts(cfg, "bf16", []))
    got = {c.field: c.cls for c in fd.changes}
    assert got == {"layer_types": "beyond", "hidden_act": "beyond", "num_experts": "re-tune", "eos_token_id": "re-render"}
    assert fd.cls == "beyond" and "sliding_attention" in fd.beyond[0].needs and "gelu" in fd.beyond[1].needs
    assert "moe_block_m" in fd.retune


def test_engine_refuses_a_checkpoint_of_other_facts_naming_them_and_the_upgrade(tmp_path, tiny_checkpoint):
    from harness.engine_loader import import_engine
    from metainfer.render import render_engine

    target = make_target("qwen3.6-35b-a3b-tiny", "bf16", "cpu")
    engine = import_engine(render_engine(target, tmp_path / "gen"))
    ck = shutil.copytree(tiny_checkpoint("bf16"), tmp_path / "ck")
    cfg = json.loads((ck / "config.json").read_text())
    cfg["text_config"]["rope_parameters"]["rope_theta"] = 5e6  # the shapes all agree: only the facts catch it
    (ck / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as err:
        engine.load(ck, "cpu", max_batch=1, max_seq_len=16)
    msg = str(err.value)
    assert "rope_theta: engine 10000.0, checkpoint 5000000.0" in msg
    assert f"metainfer upgrade --target {target.name} --to {ck}" in msg


def test_a_hugging_face_repo_id_names_its_registered_model_and_a_typo_gets_a_suggestion(tmp_path, monkeypatch):
    from metainfer.errors import UnknownNameError
    from metainfer.targets import get_model

    monkeypatch.chdir(tmp_path)  # no local folder of that name
    assert get_model("Qwen/Qwen3.6-35B-A3B").name == "qwen3.6-35b-a3b"
    with pytest.raises(UnknownNameError, match="did you mean qwen3.6-35b-a3b-tiny"):
        get_model("qwen3.6-35b-tiny")
    with pytest.raises(UnknownNameError, match="known models") as err:
        get_model("meta-llama/Llama-3.1-8B")
    assert "did you mean" not in str(err.value)


def test_a_gpu_or_format_in_upper_case_is_told_the_name():
    from metainfer.errors import UnknownNameError
    from metainfer.targets import get_gpu, get_quant

    with pytest.raises(UnknownNameError, match=r"lower case: --gpu h200"):
        get_gpu("H200")
    with pytest.raises(UnknownNameError, match=r"lower case: --quant nvfp4"):
        get_quant("NVFP4")
    with pytest.raises(UnknownNameError) as err:
        get_gpu("a100")
    assert "lower case" not in str(err.value) and "known GPUs" in str(err.value)

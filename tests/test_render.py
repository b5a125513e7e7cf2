"""`metainfer render`: the engine scaffold becomes plain, importable Python for one target."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.engine_loader import import_engine
from metainfer.cli import app
from metainfer.render import TEMPLATES, render_engine
from metainfer.targets import get_model, make_target

TINY = "qwen3.6-35b-a3b-tiny"


@pytest.mark.parametrize("model,quant,gpu", [(TINY, "bf16", "cpu"), (TINY, "nvfp4", "cpu"), ("qwen3.6-35b-a3b", "nvfp4", "h200")])
def test_render_gives_plain_importable_code(tmp_path, model, quant, gpu):
    target = make_target(model, quant, gpu)
    dest = render_engine(target, tmp_path)
    assert dest == tmp_path / f"{model}-{quant}-{gpu}"
    files = [p for p in dest.rglob("*") if p.is_file()]
    assert not [p for p in files if p.suffix == ".j2"], "template suffix left behind"
    assert (dest / "engine" / "__init__.py").is_file() and (dest / "engine" / "tunables.json").is_file()
    assert (dest / "ENGINE.md").is_file()
    # rendered files hold no jinja left over (copied files may hold "}}" as Python)
    src = TEMPLATES / "qwen3_5_moe"
    rendered = [dest / p.relative_to(src).with_suffix("") for p in src.rglob("*.j2")]
    assert rendered
    for p in rendered:
        assert not re.search(r"\{\{|\}\}|\{%|%\}|\{#|#\}", p.read_text()), f"unrendered jinja in {p}"
    # every template file made it across (rendered ones without their suffix)
    want = {p.relative_to(src).with_suffix("") if p.suffix == ".j2" else p.relative_to(src)
            for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert want | {Path("engine/rendered_for.json")} == {p.relative_to(dest) for p in files}
    rec = json.loads((dest / "engine" / "rendered_for.json").read_text())  # what the engine was rendered for
    facts = target.model.facts(target.quant)
    assert rec["facts_digest"] == facts.digest and rec["facts"]["num_experts"] == get_model(model).text["num_experts"]
    assert rec["config"] == get_model(model).config and rec["target"] == target.name and rec["model_source"] == model

    mod = import_engine(dest)
    t = get_model(model).text
    d = mod.DIMS
    assert (d.target, d.quant, d.gpu) == (target.name, quant, gpu)
    assert (d.hidden_size, d.num_layers, d.vocab_size, d.num_experts) == (
        t["hidden_size"], t["num_hidden_layers"], t["vocab_size"], t["num_experts"])
    assert list(d.layer_types) == t["layer_types"]
    assert d.rotary_dim == int(t["head_dim"] * t["rope_parameters"]["partial_rotary_factor"])
    assert d.conv_dim == 2 * t["linear_num_key_heads"] * t["linear_key_head_dim"] + t["linear_num_value_heads"] * t["linear_value_head_dim"]
    assert len(d.full_attention_layers) + len(d.linear_attention_layers) == d.num_layers


def test_render_refuses_to_overwrite_without_force(tmp_path):
    target = make_target(TINY, "bf16", "cpu")
    dest = render_engine(target, tmp_path)
    marker = dest / "engine" / "agent_edit.py"
    marker.write_text("# an accepted edit\n")
    with pytest.raises(FileExistsError, match="--force"):
        render_engine(target, tmp_path)
    assert marker.exists()
    render_engine(target, tmp_path, force=True)
    assert not marker.exists()


def test_rendered_tunables_load_and_bad_values_are_named(tmp_path):
    dest = render_engine(make_target(TINY, "bf16", "cpu"), tmp_path)
    mod = import_engine(dest)
    tun = __import__(f"{mod.__name__}.tunables", fromlist=["load_tunables"])
    path = dest / "engine" / "tunables.json"
    data = json.loads(path.read_text())
    values = tun.load_tunables(path)
    assert values.gdn_chunk_size == data["values"]["gdn_chunk_size"]
    for name, value in data["values"].items():
        assert value in data["space"][name], name
    data["values"]["gdn_chunk_size"] = 48
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="gdn_chunk_size=48 is not one of"):
        tun.load_tunables(path)
    data["values"]["gdn_chunk_size"] = 64
    data["values"]["bogus"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="unknown tunables \\['bogus'\\]"):
        tun.load_tunables(path)


def test_cli_render(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["render", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / f"{TINY}-nvfp4-cpu" / "engine" / "target.py").is_file()
    res = runner.invoke(app, ["render", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--out", str(tmp_path)])
    assert res.exit_code != 0 and "--force" in str(res.exception)
    res = runner.invoke(app, ["render", "--model", TINY, "--quant", "nvfp4", "--gpu", "cpu", "--out", str(tmp_path), "--force"])
    assert res.exit_code == 0, res.output


def test_cli_render_unknown_model_names_known_ones(tmp_path):
    res = CliRunner().invoke(app, ["render", "--model", "nope", "--quant", "bf16", "--gpu", "cpu", "--out", str(tmp_path)])
    assert res.exit_code != 0
    assert "qwen3.6-35b-a3b" in str(res.exception)

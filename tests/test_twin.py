"""harness.twin and the gate's twin stage: a candidate's edits carried onto its shallow twin, the checkpoint cut to
the same layers, and a real parity run of the twin that passes the honest engine and rejects a mutant."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from harness.twin import truncate_checkpoint
from metainfer.twin import TwinCarryError, twin_engine
from metainfer.mutants.catalogue import by_name
from metainfer.mutants.runner import apply_mutant
from metainfer.render import render_engine
from metainfer.targets import make_target

ROOT = Path(__file__).resolve().parents[1]
TINY = "qwen3.6-35b-a3b-tiny"


@pytest.fixture(scope="module")
def tiny_ckpt_nvfp4(tiny_checkpoint) -> Path:
    return tiny_checkpoint("nvfp4")


@pytest.fixture(scope="module")
def candidate(tmp_path_factory) -> Path:
    """The tiny CPU render with two edits: a tunable-free kernel comment and a changed fact line in target.py."""
    root = render_engine(make_target(TINY, "nvfp4", "cpu"), tmp_path_factory.mktemp("cand"))
    tgt = root / "engine" / "target.py"
    tgt.write_text(tgt.read_text().replace("    rms_norm_eps=1e-06,\n", "    rms_norm_eps=1e-06,  # carried edit\n", 1))
    model = root / "engine" / "model.py"
    model.write_text(model.read_text() + "\n# carried kernel-side edit\n")
    return root


def test_edits_carry_onto_the_twin_render(candidate: Path, tmp_path: Path) -> None:
    twin = twin_engine(candidate, 1, tmp_path)
    text = (twin / "engine" / "target.py").read_text()
    assert "num_layers=4," in text and "num_layers=8," not in text
    assert "rms_norm_eps=1e-06,  # carried edit" in text
    assert (twin / "engine" / "model.py").read_text().endswith("# carried kernel-side edit\n")
    rec = json.loads((twin / "engine" / "rendered_for.json").read_text())
    assert rec["config"]["text_config"]["num_hidden_layers"] == 4 and rec["model"] == f"{TINY}-shallow1"
    assert (twin / "engine" / "tunables.json").read_bytes() == (candidate / "engine" / "tunables.json").read_bytes()


def test_an_edit_of_a_depth_fact_is_refused(candidate: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(candidate, bad)
    tgt = bad / "engine" / "target.py"
    tgt.write_text(tgt.read_text().replace("num_layers=8,", "num_layers=8,  # hard-coded depth", 1))
    with pytest.raises(TwinCarryError, match="engine/target.py"):
        twin_engine(bad, 1, tmp_path / "w")


def test_truncated_checkpoint_keeps_the_first_layers_exactly(tiny_ckpt_nvfp4: Path, tmp_path: Path) -> None:
    out = truncate_checkpoint(tiny_ckpt_nvfp4, 1, tmp_path / "ck")
    cfg = json.loads((out / "config.json").read_text())["text_config"]
    assert cfg["num_hidden_layers"] == 4 and len(cfg["layer_types"]) == 4
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    src = json.loads((tiny_ckpt_nvfp4 / "model.safetensors.index.json").read_text())["weight_map"]
    kept = [k for k in src if ".layers.3." in k or "embed_tokens" in k or k == "lm_head.weight" or k.startswith("mtp.")]
    assert set(kept) <= set(index) and not [k for k in index if ".layers.4." in k or ".layers.7." in k]
    name = next(k for k in index if ".layers.3." in k and k.endswith("weight"))
    with safe_open(str(out / index[name]), "pt") as a, safe_open(str(tiny_ckpt_nvfp4 / src[name]), "pt") as b:
        assert a.get_tensor(name).equal(b.get_tensor(name))
    assert (out / "hf_quant_config.json").is_file()


def _gate(engine: Path, ckpt: Path, out: Path) -> tuple[int, dict]:
    js = out / "gate.json"
    twin = twin_engine(engine, 1, out / "twin")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "harness.gate", "--engine", str(engine), "--checkpoint", str(ckpt),
                          "--gpu", "cpu", "--stages", "twin", "--twin-engine", str(twin), "--parity-lengths", "3,65,300",
                          "--parity-steps", "4", "--seed", "5", "--isolation", "process", "--json", str(js)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert js.is_file(), res.stderr[-2000:]
    return res.returncode, json.loads(js.read_text())


def test_twin_stage_passes_the_honest_engine_and_rejects_a_mutant(candidate: Path, tiny_ckpt_nvfp4: Path,
                                                                   tmp_path: Path) -> None:
    rc, gate = _gate(candidate, tiny_ckpt_nvfp4, tmp_path)
    assert rc == 0 and gate["stages"][0]["name"] == "twin" and gate["stages"][0]["ok"], gate
    assert gate["stages"][0]["detail"]["periods"] == 1
    mutant = apply_mutant(by_name("attn_scale"), candidate, tmp_path / "m" / candidate.name)
    rc, gate = _gate(mutant, tiny_ckpt_nvfp4, tmp_path / "m")
    stage = gate["stages"][0]
    assert rc == 1 and not stage["ok"] and stage["error"].startswith("twin (1 period(s), float32 reference)"), stage


def test_mutation_suite_twin_pass_judges_survivors_on_the_twin(tiny_ckpt_nvfp4: Path, tmp_path: Path) -> None:
    """A row the first pass called survived (attn_scale, forced here) is killed by the twin's float32 judge; the
    unmutated engine still passes there."""
    from metainfer.mutants.runner import MutantOutcome, SuiteResult
    from metainfer.mutants.twin_pass import twin_pass

    engine = render_engine(make_target(TINY, "nvfp4", "cpu"), tmp_path / "e")
    m = by_name("attn_scale")
    suite = SuiteResult(MutantOutcome("(unmutated)", "nothing", "-", "pass", "first pass", 1.0),
                        [MutantOutcome(m.name, m.breaks, m.path, "survived", "first pass", 1.0)])
    twin_pass(suite, engine, tiny_ckpt_nvfp4, (m,), periods=1, device="cpu", seed=3, lengths=(3, 65, 300), steps=4,
              mutant_lengths=(3, 65, 300))
    assert suite.baseline.verdict == "pass" and "twin:" in suite.baseline.figure, suite.baseline
    row = suite.outcomes[0]
    assert row.verdict == "killed" and row.figure.startswith("twin: "), row
    assert suite.ok


def test_twin_stage_refuses_a_twin_that_does_not_run_the_candidates_code(candidate: Path, tiny_ckpt_nvfp4: Path,
                                                                          tmp_path: Path) -> None:
    twin = twin_engine(candidate, 1, tmp_path / "t")
    (twin / "engine" / "model.py").write_text((twin / "engine" / "model.py").read_text() + "\n# not the candidate's\n")
    js = tmp_path / "gate.json"
    res = subprocess.run([sys.executable, "-m", "harness.gate", "--engine", str(candidate), "--checkpoint", str(tiny_ckpt_nvfp4),
                          "--gpu", "cpu", "--stages", "twin", "--twin-engine", str(twin), "--json", str(js)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    stage = json.loads(js.read_text())["stages"][0]
    assert res.returncode == 1 and "changed engine/model.py" in stage["error"], stage

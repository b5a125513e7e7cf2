"""scripts/h200/shallow_twin.py: a full-width twin cut to whole layer periods, read back as a path model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metainfer.targets.models import get_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts/h200/shallow_twin.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_twin_keeps_every_per_layer_shape_and_cuts_whole_periods(tmp_path: Path) -> None:
    res = _run("--model", "qwen3.6-35b-a3b", "--periods", "2", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    twin = get_model(str(tmp_path / "qwen3.6-35b-a3b-shallow2"))
    real = get_model("qwen3.6-35b-a3b")
    assert twin.layer_types == real.layer_types[:8] and twin.layer_types.count("full_attention") == 2
    for key in ("hidden_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "head_dim",
                "num_attention_heads", "num_key_value_heads", "linear_num_value_heads", "vocab_size"):
        assert twin.text[key] == real.text[key], key
    assert not twin.tiny and 5e9 < twin.param_count()["total"] < real.param_count()["total"] / 4
    assert "8 layers" in res.stdout


@pytest.mark.parametrize("periods", ["0", "11"])
def test_twin_refuses_periods_the_model_does_not_have(tmp_path: Path, periods: str) -> None:
    res = _run("--model", "qwen3.6-35b-a3b", "--periods", periods, "--out", str(tmp_path))
    assert res.returncode != 0 and "the model has 10 periods of 4 layers" in res.stderr

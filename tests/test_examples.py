"""The example patches of examples/ (README's main job) still apply to the engine the template renders today,
each on its own and in the order the scripted agent applies them after a rejection (each on the base)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGET = ("qwen3.6-35b-a3b-tiny", "nvfp4", "cpu")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """A git repository holding ``generated/<target>/`` as rendered from today's template, at one commit."""
    from metainfer.render import render_engine
    from metainfer.targets import make_target

    repo = tmp_path_factory.mktemp("examples")
    render_engine(make_target(*TARGET), repo / "generated", force=True)
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True, capture_output=True)
    return repo


@pytest.mark.parametrize("patch", sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").glob("*/*.patch")))
def test_example_patch_applies_to_the_rendered_engine(rendered, patch):
    p = subprocess.run(["git", "apply", "--check", "--whitespace=nowarn", str(ROOT / patch)], cwd=rendered,
                       capture_output=True, text=True)
    assert p.returncode == 0, f"{patch} no longer applies to the rendered engine (regenerate it): {p.stderr}"
    text = (ROOT / patch).read_text()
    assert text.startswith("Subject: ") and "\nHypothesis: " in text  # the agent's summary and why, as the loop records them


def test_the_main_job_has_a_rejected_then_an_accepted_patch():
    names = sorted(p.name for p in (ROOT / "examples" / "cpu-tiny").glob("*.patch"))
    assert names == ["01-one-expert-fewer.patch", "02-dequantize-experts-once.patch"], names

"""Regression suite: every known-cheating engine in tests/cheats/ is rejected by the stage that should catch it, with the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import cheats
from cheats import render_tiny
from harness.gate import GateArgs, run_gate

CHEATS = cheats.cheats()
FAST = [c for c in CHEATS if c.STAGE == "static"]
SLOW = [c for c in CHEATS if c.STAGE != "static"]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    return render_tiny(tmp_path_factory.mktemp("cheat-render"))


def cheat_engine(rendered: Path, tmp_path: Path, cheat) -> Path:
    """A copy of the rendered tiny engine with ``cheat`` applied; returned inside its own parent folder."""
    dest = tmp_path / "root" / rendered.name
    shutil.copytree(rendered, dest)
    cheat.apply(dest)
    return dest


def gate(engine: Path, checkpoint: Path, tmp_path: Path, stages: tuple[str, ...], baseline: Path | None = None,
         workloads: tuple[str, ...] = ("conc32",)) -> dict:
    args = GateArgs(engine, checkpoint, baseline, "cpu", stages, 11, 1, "cpu", workloads, tmp_path / "gate.json",
                    parity_lengths=(1, 17), parity_steps=2)  # a quick parity: the full set takes minutes here
    return run_gate(args)


def test_every_cheat_declares_its_stage_and_reason():
    assert len(CHEATS) >= 5
    for c in CHEATS:
        assert c.STAGE in ("static", "parity", "bench") and c.DESCRIPTION and callable(c.apply), c.__name__


@pytest.mark.parametrize("cheat", FAST, ids=[c.__name__.rsplit(".", 1)[-1] for c in FAST])
def test_static_cheats_are_rejected_before_anything_runs(rendered, tiny_checkpoint, tmp_path, cheat):
    engine = cheat_engine(rendered, tmp_path, cheat)
    rec = gate(engine, tiny_checkpoint("bf16"), tmp_path, ("static", "parity", "bench"))
    assert not rec["ok"] and rec["complete"]
    assert [s["name"] for s in rec["stages"]] == ["static"], "the gate must stop at the first red stage"
    st = rec["stages"][0]
    assert not st["ok"] and cheat.REASON in st["error"], st["error"]
    assert "engine/__init__.py:" in st["error"]  # names file and line
    assert rec["parity"] is None and rec["bench"] is None
    marker = getattr(cheat, "MARKER", None)
    if marker:
        assert not (engine.parent / marker).exists(), "static checks must not execute the cheat"


@pytest.mark.slow
@pytest.mark.parametrize("cheat", SLOW, ids=[c.__name__.rsplit(".", 1)[-1] for c in SLOW])
def test_runtime_cheats_are_rejected_by_their_stage(rendered, tiny_checkpoint, tmp_path, cheat):
    engine = cheat_engine(rendered, tmp_path, cheat)
    stages = ("static", cheat.STAGE) if cheat.STAGE == "parity" else ("static", "bench")
    rec = gate(engine, tiny_checkpoint("bf16"), tmp_path, stages, baseline=rendered if cheat.STAGE == "bench" else None,
               workloads=getattr(cheat, "WORKLOADS", ("conc32",)))
    names = [s["name"] for s in rec["stages"]]
    assert names == list(stages) and rec["stages"][0]["ok"], rec["stages"]
    red = rec["stages"][-1]
    assert not rec["ok"] and not red["ok"] and red["error"], red
    assert cheat.REASON.lower() in red["error"].lower(), red["error"]
    if cheat.STAGE == "parity":
        assert rec["parity"]["ok"] is False and rec["bench"] is None

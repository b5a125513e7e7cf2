"""The prompts: system rules, the per-iteration brief (on a real rendered tiny engine), the knowledge file, recording."""

from __future__ import annotations

import shutil

import pytest

from fakes.engine_fixture import BEST_GATE, make_worktree
from metainfer.agents import ProposalContext
from metainfer.agents.gate_tools import summarize_gate
from metainfer.agents.prompts import PROMPTS_DIR, budget_lines, render_prompts, write_prompts
from metainfer.agents.tools import ToolBox, ToolError
from metainfer.render import render_engine
from metainfer.targets import make_target

RULES = ["Edit only the engine folder", "The harness is the judge", "One hypothesis per iteration",
         "State the expected gain before the change", "Keep the torch reference beside every kernel",
         "Never special-case the parity prompts"]

RED_GATE = {"schema": 1, "ok": False, "seed": 3, "engine": "e", "baseline": "b", "env": {},
            "stages": [{"name": "static", "ok": True, "seconds": 0.1, "error": None, "detail": {}},
                       {"name": "parity", "ok": False, "seconds": 9.0, "error": "logits off at prompt len-129", "detail": {}}],
            "parity": {"ok": False, "max_rel_err": 0.21, "tolerance": 0.03, "worst_prompt": "len-129-alone", "worst_layer": 14,
                       "prompts": []}}


def test_system_prompt_carries_every_rule_and_the_target(tmp_path):
    ctx = make_worktree(tmp_path)
    for loop_tools in (True, False):
        p = render_prompts(ctx, budget=["USD: at most $1.00 this iteration"], loop_tools=loop_tools, gate_tools=loop_tools)
        for rule in RULES:
            assert rule in p.system
        assert ctx.target.name in p.system and "USD: at most $1.00" in p.system
        assert ("`propose`" in p.system) == loop_tools and ("Expected gain: ..." in p.system) != loop_tools


def test_brief_on_a_rendered_tiny_engine(tmp_path):
    target = make_target("qwen3.6-35b-a3b-tiny", "nvfp4", "cpu")
    engine = render_engine(target, tmp_path / "generated")
    (engine / "ENGINE.md").write_text("# File map\n- `engine/moe.py`: routed experts\n")
    history = [{"iteration": 1, "summary": "moe_block_n 64|128\nsecond line", "accepted": False,
                "reason": "parity failed: worst layer 3", "expected_gain": "decode +5%"},
               {"iteration": 2, "summary": "fuse router softmax", "accepted": True, "reason": "faster by 4% (noise 1%)",
                "objective": {"speedup": 1.04}}]
    ctx = ProposalContext(target=target, worktree=tmp_path, engine_dir=engine, iteration=3, history=history,
                          best=BEST_GATE, record_dir=tmp_path / "runs" / "iter-003", budget_usd_left=4.0)
    brief = render_prompts(ctx, budget=budget_lines(ctx, max_usd=10, max_turns=30, time_limit_s=1200),
                           loop_tools=True, gate_tools=True).brief
    assert brief.startswith("# Iteration 3 — qwen3.6-35b-a3b-tiny-nvfp4-cpu")
    assert "hidden 128, 8 layers (6 Gated DeltaNet + 2 full attention)" in brief and "16 experts, top-4" in brief
    assert "# File map" in brief and "engine/__init__.py\t" in brief and "engine/tunables.json\t" in brief
    assert "max relative error 0.0041 (tolerance 0.03)" in brief and "worst layer 5" in brief
    assert "| decode-bs1 | tok/s | 21.5 | 0.4 | 0.0123 |" in brief and '"kernel": "moe_w4a16"' in brief
    assert "| 1 | no | moe_block_n 64\\|128 second line | decode +5% |  | parity failed: worst layer 3 |" in brief
    assert "| 2 | yes | fuse router softmax |  | 1.04 |" in brief
    assert "USD: at most $4.00 this iteration" in brief and "about 20 minutes" in brief


def test_brief_names_the_failed_stage_and_worst_layer_of_a_red_gate(tmp_path):
    ctx = make_worktree(tmp_path)
    ctx.best = RED_GATE
    brief = render_prompts(ctx, budget=budget_lines(ctx), loop_tools=True, gate_tools=True).brief
    assert "gate: red, failed at `parity`: logits off at prompt len-129" in brief
    assert "worst prompt len-129-alone; worst layer 14" in brief and "no benchmark figures yet" in brief
    assert summarize_gate(RED_GATE)["bench"] is None and summarize_gate(None) == {}


def test_knowledge_file_states_the_facts():
    text = (PROMPTS_DIR / "knowledge" / "qwen3_5_moe.md").read_text()
    for fact in ["(1 + w)", "{0, 0.5, 1, 1.5, 2, 3, 4, 6}", "low nibble", "float8_e4m3", "amax / (6·448)",
                 "top-8", "renormalised", "first 64 of the 256", "sigmoid(gate)", "128×128 fp32", "W4A16", "4.25 TB/s"]:
        assert fact in text, fact


def test_prompts_are_recorded_and_a_missing_family_is_named(tmp_path):
    ctx = make_worktree(tmp_path)
    p = render_prompts(ctx, budget=["x"], loop_tools=True, gate_tools=True)
    paths = write_prompts(p, ctx.record_dir)
    assert [f.name for f in paths] == ["system.md", "knowledge.md", "brief.md"]
    assert (ctx.record_dir / "brief.md").read_text() == p.brief
    bare = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, bare)
    shutil.rmtree(bare / "knowledge")
    with pytest.raises(FileNotFoundError, match="no knowledge file for model family 'qwen3_5_moe'"):
        render_prompts(ctx, budget=["x"], loop_tools=True, gate_tools=True, prompts_dir=bare)


def test_file_tools_stay_inside_the_engine(tmp_path):
    ctx = make_worktree(tmp_path)
    box = ToolBox(ctx.engine_dir)
    assert "engine/moe.py\t" in box.call("list_files", {})
    assert box.call("read_file", {"path": "engine/moe.py", "offset": 10}).startswith("64\n")
    (ctx.engine_dir / "engine" / "dup.py").write_text("a = 1\na = 1\n")
    with pytest.raises(ToolError, match="occurs 2 times"):
        box.call("edit_file", {"path": "engine/dup.py", "old": "a = 1", "new": "a = 2"})
    with pytest.raises(ToolError, match="not found"):
        box.call("edit_file", {"path": "engine/dup.py", "old": "b = 1", "new": "a = 2"})
    for bad in ["/etc/passwd", "../x", "engine/../../x", "~/x"]:
        with pytest.raises(ToolError):
            box.call("write_file", {"path": bad, "content": "x"})
    (ctx.engine_dir / "link").symlink_to(tmp_path)
    with pytest.raises(ToolError, match="outside the engine folder"):
        box.call("read_file", {"path": "link/wt/harness/gate.py"})
    assert box.call("write_file", {"path": "engine/new/k.py", "content": "K = 1\n"}) == "wrote engine/new/k.py (6 characters)"
    assert (ctx.engine_dir / "engine" / "new" / "k.py").read_text() == "K = 1\n"
    with pytest.raises(ToolError, match="unknown tool 'run_parity'"):
        box.call("run_parity", {})

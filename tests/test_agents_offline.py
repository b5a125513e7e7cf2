"""The offline agent: one seeded change per iteration over the declared tunables, learning from the history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metainfer.agents import AgentError, ProposalContext, get_agent
from metainfer.targets import make_target

TEMPLATE_TUNABLES = Path(__file__).resolve().parents[1] / "templates/engine/qwen3_5_moe/engine/tunables.json.j2"


def _template_tunables(gpu: str) -> str:
    """The template's tunables.json as `metainfer render` writes it for a target on ``gpu``."""
    from metainfer.render import render_context

    import jinja2

    ctx = render_context(make_target("qwen3.6-35b-a3b-tiny", "nvfp4", gpu))
    return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(TEMPLATE_TUNABLES.read_text()).render(**ctx)


def _engine(tmp_path: Path, values: dict, space: dict) -> Path:
    d = tmp_path / "generated" / "t"
    (d / "engine").mkdir(parents=True)
    (d / "engine" / "tunables.json").write_text(json.dumps({"values": values, "space": space}))
    return d


def _ctx(engine_dir: Path, i: int, history: list, seed: int = 0) -> ProposalContext:
    return ProposalContext(target=make_target("qwen3.6-35b-a3b-tiny", "bf16", "cpu"), worktree=engine_dir.parents[1],
                           engine_dir=engine_dir, iteration=i, history=history, best={}, record_dir=engine_dir.parent, seed=seed)


def _values(engine_dir: Path) -> dict:
    return json.loads((engine_dir / "engine" / "tunables.json").read_text())["values"]


def test_one_adjacent_change_with_a_readable_summary(tmp_path):
    d = _engine(tmp_path, {"a": 2, "b": "x"}, {"a": [1, 2, 3, 4], "b": ["x", "y"]})
    p = get_agent("offline").propose(_ctx(d, 1, [{"iteration": 0, "accepted": True, "tunables": {"a": 2, "b": "x"}}]))
    new = _values(d)
    changed = {k for k in new if new[k] != {"a": 2, "b": "x"}[k]}
    assert len(changed) == 1 and p.changed
    k = changed.pop()
    assert new[k] in {"a": [1, 3], "b": ["y"]}[k]  # a neighbour in the declared list
    assert f"{k} {({'a': 2, 'b': 'x'})[k]}→{new[k]}" in p.summary


def test_never_reproposes_a_gated_config_and_exhausts_cleanly(tmp_path):
    base = {"a": 2, "b": "x"}
    space = {"a": [1, 2, 3], "b": ["x", "y"]}
    d = _engine(tmp_path, base, space)
    agent = get_agent("offline")
    history = [{"iteration": 0, "accepted": True, "tunables": dict(base)}]
    seen = {json.dumps(base, sort_keys=True)}
    for i in range(1, 20):
        (d / "engine" / "tunables.json").write_text(json.dumps({"values": base, "space": space}))  # rejected: reset to best
        p = agent.propose(_ctx(d, i, history))
        if not p.changed:
            break
        v = _values(d)
        key = json.dumps(v, sort_keys=True)
        assert key not in seen, f"iteration {i} re-proposed {v}"
        seen.add(key)
        history.append({"iteration": i, "accepted": False, "tunables": v})
    # 3 single changes (a=1, a=3, b=y), then the 2 one-step pairs (a=1|3 with b=y), then nothing
    assert len(seen) == 1 + 3 + 2 and not p.changed and "exhausted" in p.summary


def test_continues_a_direction_that_won(tmp_path):
    space = {"a": [1, 2, 3, 4], "b": ["x", "y"]}
    d = _engine(tmp_path, {"a": 3, "b": "x"}, space)  # the branch head: a 2→3 was accepted
    history = [{"iteration": 0, "accepted": True, "tunables": {"a": 2, "b": "x"}},
               {"iteration": 1, "accepted": True, "tunables": {"a": 3, "b": "x"}}]
    for seed in range(5):
        (d / "engine" / "tunables.json").write_text(json.dumps({"values": {"a": 3, "b": "x"}, "space": space}))
        p = get_agent("offline").propose(_ctx(d, 2, history, seed))
        assert _values(d) == {"a": 4, "b": "x"}, p.summary
        assert "direction that won" in p.summary


@pytest.mark.parametrize("gpu", ["cpu", "h200"])
def test_seeded_and_works_on_the_template_tunables(tmp_path, gpu):
    text = _template_tunables(gpu)
    src = json.loads(text)
    outs = []
    for _ in range(2):
        d = tmp_path / f"r{len(outs)}" / "generated" / "t" / "engine"
        d.mkdir(parents=True)
        (d / "tunables.json").write_text(text)
        get_agent("offline").propose(_ctx(d.parent, 3, [], seed=7))
        outs.append(_values(d.parent))
    assert outs[0] == outs[1]
    diff = [k for k in src["values"] if outs[0][k] != src["values"][k]]
    assert len(diff) == 1 and outs[0][diff[0]] in src["space"][diff[0]]


def test_malformed_tunables_is_an_agent_error(tmp_path):
    d = tmp_path / "generated" / "t"
    (d / "engine").mkdir(parents=True)
    with pytest.raises(AgentError, match="tunables.json"):
        get_agent("offline").propose(_ctx(d, 1, []))
    (d / "engine" / "tunables.json").write_text(json.dumps({"values": {"a": 1}, "space": {"a": 3}}))
    with pytest.raises(AgentError, match="space"):
        get_agent("offline").propose(_ctx(d, 1, []))


def test_does_not_repeat_a_proposal_rejected_in_an_earlier_run_on_the_same_engine(tmp_path):
    import subprocess

    repo = tmp_path / "wt"
    d = _engine(repo, {"a": 1, "b": "x"}, {"a": [1, 2], "b": ["x", "y"]})
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "engine")
    head = git("rev-parse", "HEAD")
    runs = tmp_path / "runs"
    target = make_target("qwen3.6-35b-a3b-tiny", "bf16", "cpu").name
    for run, rejected in (("run-a", {"a": 2, "b": "x"}), ("run-other-target", {"a": 1, "b": "y"})):
        (runs / run / "iter-001").mkdir(parents=True)
        (runs / run / "run.json").write_text(json.dumps({"target": target if run == "run-a" else "another-target"}))
        (runs / run / "iter-001" / "report.json").write_text(json.dumps(
            {"iteration": 1, "accepted": False, "parent": head, "tunables": rejected, "gate": {"ok": True}}))
    (runs / "run-b" / "iter-001").mkdir(parents=True)

    def ctx():
        c = _ctx(d, 1, [{"iteration": 0, "accepted": True, "tunables": {"a": 1, "b": "x"}}])
        c.worktree, c.record_dir = repo, runs / "run-b" / "iter-001"
        return c

    p = get_agent("offline").propose(ctx())
    assert _values(d) == {"a": 1, "b": "y"}, p.summary  # a=2 lost against this engine in run-a; b=y only in another target
    assert p.transcript[0]["rejected_in_earlier_runs"] == 1
    (d / "engine" / "tunables.json").write_text(json.dumps({"values": {"a": 1, "b": "x"}, "space": {"a": [1, 2], "b": ["x"]}}))
    assert not get_agent("offline").propose(ctx()).changed  # the only move left was rejected before: nothing to do
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "an accepted change")
    get_agent("offline").propose(ctx())
    assert _values(d)["a"] == 2  # the engine changed since: the earlier rejection no longer binds

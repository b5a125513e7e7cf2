"""Resolve an upgrade: the old engine (target, branch, head, facts, accepted commits) and the new target.

The old engine is read from its branch without checking it out: ``engine/rendered_for.json``
at the head (engines rendered before it existed fall back to the registry facts of their
target name); its accepted iterations are the branch's commits after the one that rendered
the engine, which touch ``generated/<old-target>/`` (the loop commits accepted candidates only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import git

from metainfer.build.config import BuildError
from metainfer.checkpoint.facts import ModelFacts
from metainfer.targets import Target, get_gpu, get_model, get_quant, parse_target
from metainfer.targets.target import Target as _Target
from metainfer.upgrade.facts_diff import FactsDiff, classify


@dataclass(frozen=True)
class OldCommit:
    """An accepted iteration of the old branch: ``sha``, its one-line ``summary`` and trailers' ``speedup``."""

    sha: str
    summary: str
    speedup: float | None = None


@dataclass
class OldEngine:
    """The engine being upgraded, as its branch holds it.

    Attributes:
        target: the old target's name. branch: ``metainfer/<target>``. head: branch head sha.
        render_commit: the commit that rendered the engine (the branch's first touching it).
        facts: the facts it was rendered for. model_source, quant, gpu: how to name it again.
        carried: accepted iterations after ``render_commit``, oldest first.
    """

    target: str
    branch: str
    head: str
    render_commit: str
    facts: ModelFacts
    model_source: str
    quant: str
    gpu: str
    carried: list[OldCommit] = field(default_factory=list)

    @property
    def engine_rel(self) -> str:
        """``generated/<target>``."""
        return f"generated/{self.target}"


def resolve_old(root: Path, target_or_branch: str) -> OldEngine:
    """Read the old engine from branch ``metainfer/<target>`` (``target_or_branch`` may name either).

    Raises:
        BuildError: no such branch, or it holds no engine.
    """
    repo = git.Repo(root)
    name = target_or_branch.removeprefix("refs/heads/").removeprefix("metainfer/")
    branch = f"metainfer/{name}"
    if branch not in [h.name for h in repo.heads]:
        known = sorted(h.name for h in repo.heads if h.name.startswith("metainfer/"))
        raise BuildError(f"no branch {branch}; branches of generated engines here: {', '.join(known) or 'none'} "
                         "(build one with `metainfer build`)")
    rel = f"generated/{name}"
    firsts = repo.git.rev_list("--reverse", branch, "--", f"{rel}/engine/__init__.py").split()
    if not firsts:
        raise BuildError(f"{branch} holds no engine under {rel}/; build it first with `metainfer build`")
    render_commit = firsts[0]
    head = repo.commit(branch).hexsha
    try:
        rec = json.loads(repo.git.show(f"{head}:{rel}/engine/rendered_for.json"))
        facts, source, quant, gpu = ModelFacts.from_dict(rec["facts"]), rec["model_source"], rec["quant"], rec["gpu"]
    except (git.GitCommandError, ValueError, KeyError):
        t = parse_target(name)  # rendered before facts were recorded: the registry's facts for its name
        facts, source, quant, gpu = t.model.facts(t.quant), t.model.source, t.quant.name, t.gpu.name
    carried = []
    for sha in repo.git.rev_list("--reverse", f"{render_commit}..{head}", "--", rel).split():
        c = repo.commit(sha)
        speed = None
        for line in c.message.splitlines():
            if line.startswith("Speedup: "):
                try:
                    speed = float(line.split(": ", 1)[1])
                except ValueError:
                    pass
        carried.append(OldCommit(sha, c.summary, speed))
    return OldEngine(name, branch, head, render_commit, facts, source, quant, gpu, carried)


def new_target(old: OldEngine, to: str, quant: str | None = None) -> Target:
    """The new target: model ``to`` (registry name or HF folder / config.json), the old weight format (or
    ``quant``) and GPU.

    Raises:
        UnknownNameError: ``to`` is neither a registered model nor a readable config of a known family.
        BuildError: the new target has the old one's name (its branch would be the old branch, which an
            upgrade never changes).
    """
    model = get_model(to)
    t = _Target(model, get_quant(quant or old.quant), get_gpu(old.gpu))
    if t.name == old.target:
        raise BuildError(f"--to {to} names the old target {old.target} again; an upgrade writes a new branch and never "
                         "changes the old one: put the new config.json in a folder of its own name (e.g. "
                         f"{model.name}-v2/) and pass that folder, or use `--checkpoint DIR` alone for new weights")
    return t


def diff(old: OldEngine, new: Target) -> FactsDiff:
    """Classified facts diff of the old engine's facts -> the new target's."""
    return classify(old.facts, new.model.facts(new.quant))

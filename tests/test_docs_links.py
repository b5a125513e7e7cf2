"""README's and docs' links and the repository paths they and the CLI's help name must exist.

Checked: markdown links ``[text](relative/path)`` in README.md and docs/**/*.md (relative to the
file), and repository paths in backticks (``docs/...``, ``templates/...``, ``examples/...``,
``harness/...``, ``metainfer/...``, ``scripts/...``, ``tests/...``) in README.md, docs/*.md and
every command's ``--help`` text (relative to the repository root). Paths with placeholders
(``<target>``, ``*``, ``{...}``, ``NNN``), branch names (``metainfer/<model>-<quant>-<gpu>``) and folders that only exist after a run (``generated/``,
``runs/<id>``, ``.metainfer/``) are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("docs/", "templates/", "examples/", "harness/", "metainfer/", "scripts/", "tests/")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w./-])((?:docs|templates|examples|harness|metainfer|scripts|tests)/[\w./-]*[\w/])")


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]


def _checkable(p: str) -> bool:
    branch = re.fullmatch(r"metainfer/[\w.-]+-(bf16|nvfp4)-\w+", p)  # a target's branch, not a path
    return not branch and not any(c in p for c in "<>*{}$") and "NNN" not in p and not p.startswith(("generated/", ".metainfer"))


def _missing_paths(text: str) -> list[str]:
    out = []
    for span in re.findall(r"`([^`]+)`", text) + [text]:
        for p in PATH.findall(span):
            p = p.rstrip(".")
            if _checkable(p) and not (ROOT / p).exists():
                out.append(p)
    return sorted(set(out))


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_named_paths_exist(doc):
    text = doc.read_text()
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (doc.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{doc.name}: broken relative links {broken}"
    # the results folders quote paths of the device machine and of other checkouts: links only there
    if "results" not in doc.parts:
        assert not _missing_paths(text), f"{doc.relative_to(ROOT)} names paths that do not exist: {_missing_paths(text)}"


def _help_texts() -> list[tuple[str, str]]:
    import typer.main

    from metainfer.cli import app

    root = typer.main.get_command(app)
    out = [("metainfer", root.help or "")]
    for name, cmd in root.commands.items():
        texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
        out.append((name, "\n".join(texts)))
    return out


def test_cli_help_cites_only_paths_that_exist():
    bad = {name: _missing_paths(text) for name, text in _help_texts()}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"--help texts cite missing paths: {bad}"
    assert not [n for n, t in _help_texts() if "DESIGN.md" in t], "DESIGN.md is not in the repository; cite docs/ instead"

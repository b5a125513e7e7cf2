"""What the static stage's AST rules record: ``Finding``, and ``RuleVisitor``, the walk of one engine file they share.

The rules themselves: ``harness.static_ast`` (imports, calls, file writes, paths), ``harness.static_strings``
(what string literals and string constructions spell), ``harness.static_patches`` (monkeypatching).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from harness.static_scopes import ScopeTracker


@dataclass(frozen=True)
class Finding:
    """One rule broken: ``file`` (relative to the engine folder), ``line`` (1-based, None for the file), ``rule``, ``message``."""

    file: str
    line: int | None
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line or 0}: [{self.rule}] {self.message}"


class RuleVisitor(ScopeTracker):
    """A scope-aware walk of one engine file that collects findings, each once, in the order they are met."""

    def __init__(self, rel: str, depth: int) -> None:
        super().__init__()
        self.rel, self.depth = rel, depth  # depth: parent hops from the file to the engine folder
        self.findings: list[Finding] = []
        self.parents: dict[int, ast.AST] = {}  # id(node) -> its parent node, for rules on how a node is used

    def visit_Module(self, node: ast.Module) -> None:
        for parent in ast.walk(node):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
        super().visit_Module(node)

    def add(self, node: ast.AST, rule: str, msg: str) -> None:
        f = Finding(self.rel, getattr(node, "lineno", None), rule, msg)
        if f not in self.findings:
            self.findings.append(f)

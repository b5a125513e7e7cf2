"""The ``monkeypatch`` rule of the static stage: an engine may not rebind, augment or delete an attribute of an
imported module (``torch.x = ...``, ``for torch.x in``, ``with ... as torch.x``, ``del torch.x``), since the judge
runs the same modules; a lone torch configuration flag (``CONFIG_PREFIXES``) set to a constant passes.
"""

from __future__ import annotations

import ast

from harness.static_findings import RuleVisitor
from harness.static_rules import CONFIG_PREFIXES


class PatchRules(RuleVisitor):
    """The assignment rules of the static visitor."""

    def _patches(self, node: ast.AST, targets: list[ast.AST], value: ast.AST | None = None, verb: str = "assigns") -> None:
        """The monkeypatch rule on every place a statement binds (``a, torch.x = ...``, ``for torch.x in``, ``with ... as
        torch.x``, ``torch.x += 1``, ``del torch.x``); a lone flag of a torch configuration namespace set to a constant passes."""
        for t in targets:
            for leaf in _bound_attributes(t):
                root = leaf
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if not (isinstance(root, ast.Name) and self.is_module_alias(root.id)):
                    continue
                name = self.dotted(leaf) or ast.unparse(leaf)
                if leaf is t and value is not None and name.startswith(CONFIG_PREFIXES) and _plain_constant(value):
                    continue
                self.add(node, "monkeypatch", f"{verb} {name}: an engine may not patch imported modules the judge also uses"
                         + (" (a torch configuration flag may be set to a constant: torch.backends.*, torch._dynamo.config.*, "
                            "torch._inductor.config.*)" if name.startswith(CONFIG_PREFIXES) else ""))

    def visit_Assign(self, node: ast.Assign) -> None:
        self._patches(node, node.targets, node.value if len(node.targets) == 1 else None)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._patches(node, [node.target], node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._patches(node, [node.target])
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._patches(node, node.targets, verb="deletes")
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._patches(node, [node.target])
        self.generic_visit(node)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        self._patches(node, [i.optional_vars for i in node.items if i.optional_vars is not None])
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._patches(node.target, [node.target])
        self.generic_visit(node)

    visit_AsyncFor, visit_AsyncWith = visit_For, visit_With


def _bound_attributes(target: ast.AST) -> list[ast.AST]:
    """The attribute targets inside an assignment target (tuples, lists and starred unpacked; an item such as
    ``os.environ['X']`` is the object's own business, not a patch of the module)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [a for e in target.elts for a in _bound_attributes(e)]
    if isinstance(target, ast.Starred):
        return _bound_attributes(target.value)
    return [target] if isinstance(target, ast.Attribute) else []


def _plain_constant(value: ast.AST) -> bool:
    """True for a literal bool, int, float or None (``-1`` included): a flag's value, never code or a path."""
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    return isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, (bool, int, float)))

"""Name resolution for the static stage's AST visitor: which names are modules, which are locals.

A rule on ``open`` or ``exit`` must hit the builtin, not a parameter or a function of the
engine that happens to share the name; a rule on ``os._exit`` must hit it under any alias
(``import os as o``, ``from os import _exit as bye``, ``o = os``). ``ScopeTracker`` keeps, per
scope (module, function, lambda), the names bound there by assignment, parameters and
definitions, and the names that are aliases of modules or dotted objects (imports, and plain
assignments of a resolvable dotted name). Class bodies are not scopes for their methods, as in
Python.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class _Scope:
    bound: set[str] = field(default_factory=set)  # locals that are not aliases
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> dotted module or object


def _own_nodes(body: list[ast.AST]):
    """Nodes of a scope's body, not descending into nested functions, lambdas or classes (but yielding them)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _NESTED):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(node.decorator_list)
            if not isinstance(node, ast.ClassDef):
                stack.extend(d for d in node.args.defaults + node.args.kw_defaults if d is not None)


class ScopeTracker(ast.NodeVisitor):
    """An ``ast.NodeVisitor`` that knows, at every node, the enclosing scopes' bindings.

    Subclasses call ``super().visit_Module/Import/ImportFrom`` when they override them and use
    ``bound(name)``, ``resolve(name)``, ``dotted(node)`` and ``is_module_alias(name)``.
    """

    def __init__(self) -> None:
        self.scopes: list[_Scope] = []

    # scope bookkeeping ---------------------------------------------------------------------
    def _enter(self, body: list[ast.AST], params: ast.arguments | None) -> None:
        scope = _Scope()
        if params is not None:
            args = params.posonlyargs + params.args + params.kwonlyargs + [a for a in (params.vararg, params.kwarg) if a]
            scope.bound.update(a.arg for a in args)
        pending: dict[str, ast.AST] = {}
        for node in _own_nodes(body):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if isinstance(node, ast.Import):
                        scope.aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    elif node.level == 0 and node.module:
                        scope.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                    else:
                        scope.bound.add(a.asname or a.name)  # the engine's own module
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, (ast.Name, ast.Attribute)):
                pending[node.targets[0].id] = node.value
            elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                scope.bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not body:
                scope.bound.add(node.name)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                scope.bound.add(node.name)
        self.scopes.append(scope)
        for name, value in pending.items():  # ``o = os``: o is os wherever it is used
            target = self.dotted(value)
            if target is not None and target.split(".")[0] not in scope.bound | {name}:
                scope.bound.discard(name)
                scope.aliases[name] = target
            else:
                scope.bound.add(name)

    def visit_Module(self, node: ast.Module) -> None:
        self._enter(node.body, None)
        self.generic_visit(node)
        self.scopes.pop()

    def _visit_function(self, node) -> None:
        for d in node.decorator_list + [d for d in node.args.defaults + node.args.kw_defaults if d is not None]:
            self.visit(d)
        for a in [node.returns] + [x.annotation for x in node.args.args + node.args.kwonlyargs]:
            if a is not None:
                self.visit(a)
        self._enter(node.body, node.args)
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for d in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(d)
        self._enter([node.body], node.args)
        self.visit(node.body)
        self.scopes.pop()

    # queries -------------------------------------------------------------------------------
    def bound(self, name: str) -> bool:
        """True when ``name`` is a local (assigned, a parameter, a def) of an enclosing scope rather than a
        builtin or an import alias; the innermost scope that knows the name decides."""
        for scope in reversed(self.scopes):
            if name in scope.aliases:
                return False
            if name in scope.bound:
                return True
        return False

    def resolve(self, name: str) -> str:
        """The dotted object an alias stands for (``np`` -> ``numpy``), else ``name`` itself."""
        for scope in reversed(self.scopes):
            if name in scope.aliases:
                return scope.aliases[name]
            if name in scope.bound:
                return name
        return name

    def is_module_alias(self, name: str) -> bool:
        """True when ``name`` stands for an imported module or object (the monkeypatch rule)."""
        return not self.bound(name) and any(name in s.aliases for s in self.scopes)

    def dotted(self, node: ast.AST) -> str | None:
        """``np.load`` -> ``numpy.load`` through the aliases; None when not a dotted name or rooted at a local."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or self.bound(node.id):
            return None
        parts.append(self.resolve(node.id))
        return ".".join(reversed(parts))

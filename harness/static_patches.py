"""The ``monkeypatch`` rule of the static stage: an engine may not rebind, augment or delete an attribute of an
imported module (``torch.x = ...``, ``for torch.x in``, ``with ... as torch.x``, ``del torch.x``), since the judge
runs the same modules; a lone torch configuration flag (``CONFIG_PREFIXES``) set to a constant passes (a bool, int,
float or None; a string only on the precision and backend-choice flags of ``STRING_FLAGS``, one of their choices).
"""

from __future__ import annotations

import ast

from harness.static_findings import RuleVisitor
from harness.static_rules import CONFIG_PREFIXES, CONFIG_SETTERS, STRING_FLAGS


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
                if leaf is t and value is not None and name.startswith(CONFIG_PREFIXES) \
                        and (_plain_constant(value) or _string_choice(name, value)):
                    continue
                self.add(node, "monkeypatch", f"{verb} {name}: an engine may not patch imported modules the judge also uses"
                         + (" (a torch configuration flag may be set to a constant: torch.backends.*, torch._dynamo.config.*, "
                            "torch._inductor.config.*: a bool, int, float or None; a string only on the precision and "
                            "backend-choice flags, one of their choices: torch.backends.*.fp32_precision "
                            "('ieee', 'tf32', 'bf16', 'none'), inductor's max_autotune_gemm_backends / max_autotune_conv_backends)"
                            if name.startswith(CONFIG_PREFIXES) else ""))

    def _config_setter(self, node: ast.AST, name: str | None) -> None:
        """A flag of a torch configuration module set some other way than by assignment: ``config.patch(...)`` takes
        what an assignment may take (literal keys, each a constant or one of a string flag's choices); ``load_config``,
        ``__setattr__``, ``_config``, ``__dict__``, ``vars(config)`` are refused."""
        if name is None or not name.startswith(CONFIG_PREFIXES):
            return
        module, _, attr = name.rpartition(".")
        if attr in CONFIG_SETTERS:
            self.add(node, "monkeypatch", f"uses {name}: it sets torch configuration flags past the rule on them (each flag "
                     f"assigned alone, a constant: `{module}.<flag> = True`)")
        elif attr == "patch":
            call = self.parents.get(id(node))
            bad = _patch_problem(module, call if isinstance(call, ast.Call) and call.func is node else None)
            if bad is not None:
                self.add(node, "monkeypatch", f"{name}(...): {bad}; it takes what an assignment of the flag may take "
                         "(literal keys; a constant, or one of a precision/backend flag's string choices)")

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
    ``os.environ['X']`` is no patch of the module: the environment has its own rule, ``harness.static_env``)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [a for e in target.elts for a in _bound_attributes(e)]
    if isinstance(target, ast.Starred):
        return _bound_attributes(target.value)
    return [target] if isinstance(target, ast.Attribute) else []


def _patch_problem(module: str, call: ast.Call | None) -> str | None:
    """Why a configuration module's ``patch`` is refused, or None: passed around uncalled, a computed key or
    value, or a flag set to what an assignment may not take."""
    if call is None:
        return "passed around uncalled (its flags are out of sight)"
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return "flags unpacked from a computed mapping"
    if len(call.args) == 2 and not call.keywords:
        pairs = [(call.args[0], call.args[1])]
    elif len(call.args) == 1 and isinstance(call.args[0], ast.Dict) and not call.keywords:
        if any(k is None for k in call.args[0].keys):
            return "flags unpacked from a computed mapping"
        pairs = list(zip(call.args[0].keys, call.args[0].values))
    elif not call.args:
        pairs = [(ast.Constant(k.arg), k.value) for k in call.keywords]
    else:
        return "flags in a computed mapping"
    for key, value in pairs:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return "a computed flag name"
        flag = f"{module}.{key.value}"
        if not (_plain_constant(value) or _string_choice(flag, value)):
            return f"sets {flag} to {ast.unparse(value)[:60]}"
    return None


def _string_choice(name: str, value: ast.AST) -> bool:
    """True for a string literal set on a flag of ``STRING_FLAGS`` that is one of its choices (each item of a list
    flag such as ``"ATEN,TRITON"``): never a path, program or command."""
    if name not in STRING_FLAGS or not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        return False
    choices, sep = STRING_FLAGS[name]
    if sep is None:
        return value.value in choices
    return all(item.strip().upper() in choices for item in value.value.split(sep))


def _plain_constant(value: ast.AST) -> bool:
    """True for a literal bool, int, float or None (``-1`` included): a flag's value, never code or a path."""
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
        value = value.operand
    return isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, (bool, int, float)))

"""Rules on strings of engine source: a dunder name built from pieces, and literals naming frames, globals,
builtins, ``/proc`` or a path out of the engine folder (``forbidden-call``, ``path-escape``).

A construction (``"__glo" + "bals__"``, f-strings, ``"".join([...])``, ``"%s" % x``, ``"{}".format(x)``) is read
back into the text it spells, a computed part standing as ``_COMPUTED``; a name computed from data at run time is
beyond any AST rule (``harness.static_ast``).
"""

from __future__ import annotations

import ast
import re

from harness.static_findings import RuleVisitor
from harness.static_rules import ENV_OBJECTS, ENV_SETTERS, INTROSPECTION_ATTRS, PROC_WORDS

#: names of the environment's writers, refused as whole strings (``getattr(m, 'putenv')``): ``harness.static_env``
_ENV_WORDS = {o.rsplit('.', 1)[1] for o in ENV_OBJECTS} | ENV_SETTERS


def _pieces(node: ast.AST) -> list[str] | None:
    """The string constants of a string built from pieces (``a + b``, f-strings, ``"".join([...])``, ``"%s%s" % (...)``),
    in order, a computed part as ''; None when ``node`` is not such a construction."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _pieces(node.left), _pieces(node.right)
        if left is None and right is None and not any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                                                      for n in (node.left, node.right)):
            return None
        return (left or [_const(node.left)]) + (right or [_const(node.right)])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for a, b in ((node.left, node.right), (node.right, node.left)):
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and isinstance(b, ast.Constant) and isinstance(b.value, int):
                return [a.value * max(0, min(b.value, 64))]
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        args = node.right.elts if isinstance(node.right, (ast.Tuple, ast.List)) else [node.right]
        return [node.left.value.replace("%s", "")] + [_const(a) for a in args]
    if isinstance(node, ast.JoinedStr):
        return [_const(v) for v in node.values]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("join", "format") \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        if node.func.attr == "join" and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
            return [_const(e) for e in node.args[0].elts]
        if node.func.attr == "format":
            return [node.func.value.value.replace("{}", "")] + [_const(a) for a in node.args]
    return None


def _const(node: ast.AST) -> str:
    inner = _pieces(node)
    if inner is not None:
        return "".join(inner)
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else _COMPUTED


_COMPUTED = "\x00"  # stands for a computed part of a built string
_DUNDER_TOKEN = re.compile(r"__[A-Za-z][A-Za-z0-9_]*?__")
#: dunders that reach builtins, the import system or a namespace, refused inside any string (not only alone)
_REACH_DUNDERS = {"__import__", "__dict__", "__class__", "__base__", "__bases__", "__mro__", "__getattribute__"}
_DUNDER_EDGE = re.compile(r"^__[A-Za-z]|[A-Za-z]__$")


def _built_dunder(node: ast.AST) -> str | None:
    """The dunder-looking text a string construction spells (``"__glo" + "bals__"``: two underscores written next
    to a written letter at either end), or None."""
    pieces = _pieces(node)
    if not pieces:
        return None
    text = "".join(pieces)
    return text.replace(_COMPUTED, "{}") if _DUNDER_EDGE.search(text) else None


class StringRules(RuleVisitor):
    """The string rules of the static visitor; docstrings are prose and pass."""

    def __init__(self, rel: str, depth: int) -> None:
        super().__init__(rel, depth)
        self.docstrings: set[int] = set()  # ids of the docstring constants

    def visit_Module(self, node: ast.Module) -> None:
        for n in ast.walk(node):
            body = getattr(n, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                self.docstrings.add(id(body[0].value))
        super().visit_Module(node)

    def _dunder(self, node: ast.AST) -> bool:
        text = _built_dunder(node)
        if text is not None:
            self.add(node, "forbidden-call", f"builds the dunder name {text!r} from pieces: a string-built dunder name reaches "
                     "frames, globals or builtins past the rules; write the attribute out")
        return text is not None

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if not self._dunder(node):
            self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        if not self._dunder(node):
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        v = node.value
        if not isinstance(v, str) or id(node) in self.docstrings:
            return
        inner = [t for t in _DUNDER_TOKEN.findall(v) if t in INTROSPECTION_ATTRS or t in _REACH_DUNDERS]
        if v in INTROSPECTION_ATTRS:
            self.add(node, "forbidden-call", f"names {v!r}: frames, code objects and globals are off limits")
        elif inner:  # '0.__globals__[__builtins__]': a field path that string.Formatter or a getter would walk
            self.add(node, "forbidden-call", f"names {inner[0]!r} inside the string {v[:60]!r}: frames, code objects, globals "
                     "and builtins are off limits")
        elif v in PROC_WORDS or v.startswith("/proc/"):
            self.add(node, "forbidden-call", f"names {v!r}: the judge's process state (/proc, its command line) is off limits")
        elif v in _ENV_WORDS:
            self.add(node, "env-write", f"names {v!r}: the process environment is read with os.environ.get / os.getenv, "
                     "never reached by a string name or changed")
        elif "\n" not in v and " " not in v and ((v.startswith("/") and v.count("/") >= 2 and len(v) > 3) or v.startswith("~/")
                                                   or v == ".." or "../" in v or v.endswith("/..")):
            self.add(node, "path-escape", f"path literal {v!r} points outside the engine folder; the engine reads only its own files and the checkpoint it is given")

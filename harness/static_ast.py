"""AST rules of the static stage: what engine source may not do, each finding with file and line.

KernelBench-style anti-cheat (DESIGN.md, "Style"): an engine computes its logits itself, from
the checkpoint, with no help from the reference, the judge, the network or a file prepared
earlier. Nothing is executed here. The rules (name tables and the threads decision in
``harness.static_rules``; the rules on strings in ``harness.static_strings``, the monkeypatch rule in
``harness.static_patches``, the others in this module's visitor):

- ``forbidden-import``: the reference model and the judge, process, network and pickle modules,
  loaders of non-source code (``importlib.machinery``/``util``, ``zipimport``, ``runpy``, ...),
  native code, threads; ``metainfer`` other than ``metainfer.checkpoint`` / ``metainfer.formats``;
  ``importlib.import_module`` loads only the engine's own modules (a relative name, ``f".{m}"``, against
  ``__name__`` / ``__package__``) and ``__import__`` nothing: a module loaded by an absolute or computed name would
  dodge the dotted-name rules (``importlib.import_module("os").system(...)``); neither is passed around uncalled.
- ``forbidden-call``: a refused callable referenced at all (called, aliased or passed):
  ``torch.load``, ``os._exit``/``sys.exit``, ``eval``/``exec``/``compile``, frame and heap
  walking (``sys._getframe``, ``inspect.stack``, ``gc.get_referrers``, ``f_back``, ``__globals__``),
  ``sys.argv``, ``sys.modules``/``sys.path``, a module's namespace (``vars(os)``, ``sys.__dict__``),
  ``getattr`` of such modules by a computed name, ``raise SystemExit``, words naming ``/proc``; a watched module
  (``WATCHED_MODULES``: ``os``, ``sys``, ``os.path``, ``importlib``, ...) used as a value rather than as the object of
  an attribute access (``f(os)``, ``m = sys``, ``[io]``), since what receives it is out of the rules' sight.
- ``file-write``: the capability to write a file: ``open``/``Path.open`` with a writing or
  computed mode, the builtin ``open`` passed around, pathlib's writing methods, ``os``/``shutil``
  writers. A method or local variable that merely has such a name (``cache.write``, a parameter
  ``open``) is not the capability and passes.
- ``path-escape``: an absolute path literal, a ``..`` component, or ``__file__`` climbed past the
  engine folder (``parents[i]`` / ``.parent`` chains / ``os.path.dirname`` nesting).
- ``monkeypatch``: assigning an attribute of an imported module, or ``setattr`` on torch/numpy/builtins/...
- ``env-write``: changing the process environment (``os.environ[k] = v``, ``os.environ.update``, ``os.putenv``,
  ``os.environ`` handed on as a value; ``harness.static_env``): libraries run what it names.

A capability is refused however it is named: a refused module reached as another module's attribute
(``torch.multiprocessing``, ``os.sys``, ``numpy.ctypeslib.ctypes``), a dunder name built from pieces
(``"__glo" + "bals__"``), ``getattr`` passed around, ``operator.methodcaller``, ``__getattribute__``/``__self__``,
library functions that run code from strings (``cProfile``, ``pdb``, ``doctest``) and unpickling switches
(``weights_only=False``, ``allow_pickle=True``). A name computed from data (read from a file) is beyond any AST
rule: the worker's isolation (docs/CONTRACTS.md) is the wall, these rules the first line.
"""

from __future__ import annotations

import ast

from harness.static_env import EnvRules
from harness.static_findings import Finding
from harness.static_patches import PatchRules
from harness.static_rules import (
    ALLOWED_METAINFER, CONFIG_PREFIXES, DYNAMIC_TARGETS, ENV_WHY, FORBIDDEN_ATTRS, FORBIDDEN_CALLS, FORBIDDEN_MODULES, FORBIDDEN_NAMES,
    FORBIDDEN_PREFIXES, FORBIDDEN_ROOTS, INTROSPECTION_ATTRS, MODULE_ATTRS, PATCH_ROOTS, UNPICKLING_KEYWORDS, WATCHED_MODULES,
    WRITE_METHODS,
)
from harness.static_strings import StringRules

__all__ = ["Finding", "check_source", "forbidden_module"]

#: Calls whose first argument is a module name: ``importlib.import_module`` may load only the engine's own modules
#: (a relative name against ``__name__`` / ``__package__``), ``__import__`` none (its package comes from a globals
#: mapping the caller hands it); an import statement names what it loads, and the rules then check every use.
_DYNAMIC_IMPORTS = {"__import__", "builtins.__import__", "importlib.import_module", "importlib.__import__"}
_IMPORT_HINT = ("use an import statement (`import x` / `from x import y`) so the rules check its uses; "
                "importlib.import_module may load only the engine's own modules: importlib.import_module(f'.{name}', __name__)")
#: A module's identity: ``importlib.import_module('.x', __name__)`` resolves against it, so it is never rebound.
_IDENTITY_ATTRS = ("__name__", "__package__")
#: Getters whose first argument is an object read by name (a watched module may stand there; their own rules apply).
_READ_GETTERS = {"getattr", "builtins.getattr", "hasattr", "builtins.hasattr"}
_OPENERS = {"open", "builtins.open"}
#: allowed called with keywords other than filename/filemode (it then logs to stderr)
_BASIC_CONFIG = "logging.basicConfig"
#: Attribute getters: passed around as values, their object and name are out of sight.
_GETTERS = {"getattr", "builtins.getattr", "setattr", "builtins.setattr", "delattr", "builtins.delattr", "vars", "builtins.vars"}


def forbidden_module(name: str) -> str | None:
    """Why the absolute module ``name`` may not be imported by an engine, or None when it may."""
    root = name.split(".")[0]
    if root == "metainfer":
        if any(name == a or name.startswith(a + ".") for a in ALLOWED_METAINFER):
            return None
        return f"imports {name}: an engine may use only {' and '.join(ALLOWED_METAINFER)} of metainfer"
    if root in FORBIDDEN_ROOTS:
        return f"imports {name}: {root} is off limits to an engine ({FORBIDDEN_ROOTS[root]})"
    for mod, why in FORBIDDEN_MODULES.items():
        if name == mod or name.startswith(mod + "."):
            return f"imports {name}: {why}"
    return None


def _forbidden_callable(name: str) -> str | None:
    if name in FORBIDDEN_CALLS:
        return FORBIDDEN_CALLS[name]
    return next((why for pre, why in FORBIDDEN_PREFIXES.items() if name.startswith(pre)), None)


def _writes(mode: ast.AST | None) -> bool:
    """True when an ``open`` mode argument may write (a literal with w/a/x/+, or anything computed)."""
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return True


class _Visitor(StringRules, PatchRules, EnvRules):
    """Every rule on one engine file: imports, references, calls and paths here; strings, assignments and the
    environment in the bases."""

    def __init__(self, rel: str, depth: int) -> None:
        super().__init__(rel, depth)
        self.called: set[int] = set()  # ids of nodes that are the func of a Call

    # imports ---------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if (why := forbidden_module(a.name)) is not None:
                self.add(node, "forbidden-import", why)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names if node.level else ():  # ``from .util import os``: a watched module under an engine name
            if a.name in WATCHED_MODULES:
                self.add(node, "forbidden-call", f"imports {a.name} from the engine's own module {'.' * node.level}"
                         f"{node.module or ''}: a watched module handed on between modules dodges the rules on its uses; "
                         f"import it by name (`import {a.name}`), or rename a module of your own called {a.name!r}")
        if node.level == 0 and node.module:
            if (why := forbidden_module(node.module)) is not None:
                self.add(node, "forbidden-import", why)
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if forbidden_module(node.module) is None and (why := forbidden_module(full)) is not None:
                    self.add(node, "forbidden-import", why)
                elif (why := _forbidden_callable(full) or FORBIDDEN_ATTRS.get(full)) is not None:
                    self.add(node, "env-write" if why == ENV_WHY else "forbidden-call", f"imports {full}: {why}")
        self.generic_visit(node)

    # references ------------------------------------------------------------------------------
    def _reference(self, node: ast.AST, name: str) -> None:
        """Rules on a dotted name referenced anywhere (called or not)."""
        if (why := _forbidden_callable(name)) is not None:
            rule = "file-write" if "writes no files" in why else "env-write" if why == ENV_WHY else "forbidden-call"
            self.add(node, rule, f"uses {name}: {why}")
        elif name in FORBIDDEN_ATTRS:
            self.add(node, "forbidden-call", f"reads {name}: {FORBIDDEN_ATTRS[name]}")
        elif name in _OPENERS and id(node) not in self.called:
            self.add(node, "file-write", "passes the builtin open around (its mode is out of sight): call open(path) to read")
        elif name == _BASIC_CONFIG and id(node) not in self.called:
            self.add(node, "file-write", f"passes {name} around (whether it is given a filename is out of sight): call it")
        elif name in _GETTERS and id(node) not in self.called:
            self.add(node, "forbidden-call", f"passes {name} around (the object and the attribute name are out of sight): call it")
        elif name in ("globals", "builtins.globals") and id(node) not in self.called:
            self.add(node, "forbidden-call", "passes globals around (what writes the module's names is out of sight): call it")
        elif name in _DYNAMIC_IMPORTS and (id(node) not in self.called or isinstance(node, ast.Call)):
            self.add(node, "forbidden-call", f"passes {name} around (the module name it is given is out of sight): {_IMPORT_HINT}")
        if "." in name and isinstance(node, ast.Attribute) and (why := forbidden_module(name)) is not None \
                and not why.startswith("imports metainfer"):  # torch.multiprocessing: a refused module reached as an attribute
            self.add(node, "forbidden-import", f"reaches {name} through its parent module: {why.split(': ', 1)[-1]}")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES and not self.bound(node.id):
            self.add(node, "forbidden-call", f"uses {node.id}: it reaches builtins or the module loader")
        elif isinstance(node.ctx, ast.Load) and not self.bound(node.id):
            self._reference(node, self.resolve(node.id))
            self._module_value(node, self.resolve(node.id))
        if not self.bound(node.id):
            self._environment(node, self.resolve(node.id))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.dotted(node)
        if name is not None:
            self._reference(node, name)
            if isinstance(node.ctx, ast.Load):
                self._module_value(node, name)
        self._environment(node, name)
        self._config_setter(node, name)
        if node.attr in INTROSPECTION_ATTRS:
            self.add(node, "forbidden-call", f"reads .{node.attr}: frames, code objects and globals could reach the judge's data")
        elif node.attr in MODULE_ATTRS and name != node.attr and (name is None or forbidden_module(name) is None):
            self.add(node, "forbidden-call", f"reaches the module {node.attr} as an attribute ({name or '.' + node.attr}): its rules "
                     f"would not apply; import it by name (or rename an attribute of your own called {node.attr!r})")
        if node.attr in _IDENTITY_ATTRS and isinstance(node.ctx, (ast.Store, ast.Del)):
            self.add(node, "forbidden-call", f"rebinds .{node.attr}: the engine's relative imports resolve against a module's "
                     "(functools.wraps names a wrapper)")
        if node.attr == "__dict__" and (base := self.dotted(node.value)) and base.split(".")[0] in DYNAMIC_TARGETS:
            self.add(node, "forbidden-call", f"reads {base}.__dict__: module namespaces hide what is called")
        if node.attr == "parent" and self._climb(node) > self.depth:
            self.add(node, "path-escape", "climbs out of the engine folder with .parent from __file__")
        self.generic_visit(node)

    def _module_value(self, node: ast.Name | ast.Attribute, name: str) -> None:
        """A watched module (``WATCHED_MODULES``) appears only as the object of an attribute access (``os.path.join``,
        ``sys.version_info``) or of ``getattr``/``hasattr`` by a literal name: as a value (an argument, an assignment, a
        return, an item, a default), what receives it calls its members out of the rules' sight."""
        if name not in WATCHED_MODULES:
            return
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return
        if isinstance(parent, ast.Call) and parent.args[:1] == [node] and len(parent.args) >= 2 \
                and self.dotted(parent.func) in _READ_GETTERS and isinstance(parent.args[1], ast.Constant) and isinstance(parent.args[1].value, str):
            return  # getattr(os, 'sep'): the name is checked like os.sep (_check_getattr)
        where = f"{type(parent).__name__.lower()}: {ast.unparse(parent)[:60]}" if parent is not None else name
        self.add(node, "forbidden-call", f"uses the module {name} as a value ({where}): handed on, its members are called "
                 f"out of the rules' sight; use it only as `{name}.<attribute>` and pass on what you need from it (a function, "
                 "a value)")

    # calls -----------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        self.called.add(id(node.func))
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("join", "format"):
            self._dunder(node)
        for kw in node.keywords:
            if kw.arg in UNPICKLING_KEYWORDS and not (isinstance(kw.value, ast.Constant) and kw.value.value is (not UNPICKLING_KEYWORDS[kw.arg])):
                self.add(node, "forbidden-call", f"{kw.arg}={ast.unparse(kw.value)}: unpickling runs stored code; weights come only "
                         "through metainfer.checkpoint")
        name = self.dotted(node.func)
        if name is not None and not (isinstance(node.func, ast.Name) and self.bound(node.func.id)):
            self._check_call(node, name)
        if isinstance(node.func, ast.Attribute):
            self._check_method(node, node.func.attr)
        self.generic_visit(node)

    def _check_method(self, node: ast.Call, attr: str) -> None:
        if attr in WRITE_METHODS:
            self.add(node, "file-write", f"calls .{attr}(): an engine writes, moves or deletes no files")
        elif attr == "open":  # Path.open(mode) / ZipFile.open(name, mode)
            mode = next((a for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                         and set(a.value) <= set("rwabxt+") and a.value), None)
            kw = next((k.value for k in node.keywords if k.arg == "mode"), None)
            if _writes(kw) or _writes(mode) or any(k.arg is None for k in node.keywords):
                self.add(node, "file-write", "calls .open() with a writing or computed mode: an engine writes no files")

    def _check_call(self, node: ast.Call, name: str) -> None:
        first = node.args[0] if node.args else None
        literal = first.value if isinstance(first, ast.Constant) else None
        if name in _DYNAMIC_IMPORTS:
            if name == "importlib.import_module" and self._relative(node):
                return  # relative to the engine package (a top-level package: it cannot climb out)
            if not isinstance(literal, str):
                self.add(node, "forbidden-call", f"{name}() of a computed name hides what is imported; {_IMPORT_HINT}")
            elif (why := forbidden_module(literal)) is not None:
                self.add(node, "forbidden-import", why)
            elif literal.startswith("."):
                self.add(node, "forbidden-call", f"{name}({literal!r}, ...) resolves a relative name against a package other "
                         f"than the calling module's __name__ / __package__ (or through __import__'s globals); {_IMPORT_HINT}")
            else:
                self.add(node, "forbidden-call", f"{name}({literal!r}) loads a module by an absolute name, past the rules on "
                         f"what its uses may do; {_IMPORT_HINT}")
        elif name == _BASIC_CONFIG:  # to stderr is fine; filename= (or arguments out of sight) writes a file
            if node.args or any(k.arg in (None, "filename", "filemode") for k in node.keywords):
                self.add(node, "file-write", "calls logging.basicConfig with a filename or with arguments out of sight: "
                         "an engine writes no files (log to stderr: logging.basicConfig(level=...))")
        elif name in _OPENERS:
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            starred = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
            if _writes(mode) or starred:
                self.add(node, "file-write", "opens a file with a writing or computed mode: an engine writes no files")
        elif name in ("vars", "builtins.vars", "globals", "locals") and first is not None:
            target = self.dotted(first)
            if target is not None and target.split(".")[0] in DYNAMIC_TARGETS:
                self.add(node, "forbidden-call", f"{name}({target}) reads a module's namespace: name the function")
        if name in ("vars", "builtins.vars") and first is not None and ((self.dotted(first) or "") + ".").startswith(CONFIG_PREFIXES):
            self.add(node, "monkeypatch", f"vars({self.dotted(first)}) reaches a torch configuration module's flags past the "
                     "rule on them: assign a flag alone, a constant")
        if name in ("setattr", "builtins.setattr", "delattr", "builtins.delattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in _IDENTITY_ATTRS:
            self.add(node, "forbidden-call", f"{name}(..., {node.args[1].value!r}) renames a module: the engine's relative "
                     "imports resolve against it")
        if name in ("globals", "builtins.globals") and not self._reads_mapping(node):
            self.add(node, "forbidden-call", "globals() written or handed on: it rebinds module names (__name__, which the "
                     "engine's relative imports resolve against) past the rules; read it only (globals()[k], .get(k), k in)")
        if name in ("setattr", "builtins.setattr", "delattr", "builtins.delattr") and first is not None:
            target = self.dotted(first)
            if target is not None and target.split(".")[0] in PATCH_ROOTS:
                self.add(node, "monkeypatch", f"{name}({target}, ...) patches a module or class the judge also uses")
        if name in ("getattr", "builtins.getattr", "setattr", "builtins.setattr", "hasattr") and len(node.args) >= 2:
            self._check_getattr(node, name)
        if name == "operator.attrgetter":
            for a in node.args:
                text = a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
                if text is None or any(p in INTROSPECTION_ATTRS or p in MODULE_ATTRS or p.startswith("__") for p in text.split(".")):
                    self.add(node, "forbidden-call", "operator.attrgetter of a computed, dunder or module name hides what is "
                             "read; name the attribute")
        if name == "os.path.dirname" and self._climb(node) > self.depth:
            self.add(node, "path-escape", "climbs out of the engine folder with nested os.path.dirname(__file__)")

    def _reads_mapping(self, node: ast.AST) -> bool:
        """True when ``node`` (a mapping such as ``globals()``) is only read where it stands."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return isinstance(parent.ctx, ast.Load)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return parent.attr in ("get", "keys", "values", "items", "copy")
        return isinstance(parent, ast.Compare) and node in parent.comparators \
            and isinstance(parent.ops[parent.comparators.index(node)], (ast.In, ast.NotIn))

    def _check_getattr(self, node: ast.Call, name: str) -> None:
        target, key = self.dotted(node.args[0]), node.args[1]
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            if key.value in INTROSPECTION_ATTRS:
                self.add(node, "forbidden-call", f"{name}(..., {key.value!r}) reaches frames, code or globals")
            elif key.value in MODULE_ATTRS:
                self.add(node, "forbidden-call", f"{name}(..., {key.value!r}) reaches the module {key.value} as an attribute: "
                         "its rules would not apply; import it by name")
            elif target is not None:
                self._reference(node, f"{target}.{key.value}")
        elif target is not None and target.split(".")[0] in DYNAMIC_TARGETS:
            self.add(node, "forbidden-call", f"{name}({target}, <computed name>) hides what is called; name the function")

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id in ("SystemExit", "KeyboardInterrupt", "BaseException") and not self.bound(exc.id):
            self.add(node, "forbidden-call", f"raises {exc.id}: an engine never ends the process; raise an Exception subclass")
        self.generic_visit(node)

    def _relative(self, node: ast.Call) -> bool:
        """True when ``import_module`` loads one of the engine's own modules: the name is a literal or f-string starting
        with '.', resolved against the calling module's ``__name__`` / ``__package__`` (another package,
        ``import_module('.', 'os')``, would load that package's modules)."""
        arg = node.args[0] if node.args else None
        if isinstance(arg, ast.JoinedStr) and arg.values:
            arg = arg.values[0]
        package = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "package"), None)
        own = isinstance(package, ast.Name) and package.id in _IDENTITY_ATTRS and not self.bound(package.id) \
            and self.resolve(package.id) == package.id  # not ``from os import name as __name__``
        return own and len(node.args) <= 2 and isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
            and arg.value.startswith(".")

    # paths -----------------------------------------------------------------------------------
    def _climb(self, node: ast.AST) -> int:
        """Parent hops from ``__file__`` in a ``.parent`` / ``parents[i]`` / ``dirname`` chain, 0 when no ``__file__``."""
        hops = 0
        while True:
            if isinstance(node, ast.Attribute) and node.attr == "parent":
                hops, node = hops + 1, node.value
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
                idx = node.slice.value if isinstance(node.slice, ast.Constant) else 99
                hops, node = hops + (idx + 1 if isinstance(idx, int) and idx >= 0 else 99), node.value.value
            elif isinstance(node, ast.Call) and self.dotted(node.func) == "os.path.dirname" and node.args:
                hops, node = hops + 1, node.args[0]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute"):
                node = node.func.value
            elif isinstance(node, ast.Call) and self.dotted(node.func) in ("pathlib.Path", "Path", "os.path.abspath", "os.path.realpath") and node.args:
                node = node.args[0]
            else:
                return hops if isinstance(node, ast.Name) and node.id == "__file__" else 0

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "parents" and self._climb(node) > self.depth:
            self.add(node, "path-escape", "climbs out of the engine folder with parents[...] of __file__")
        self.generic_visit(node)


def check_source(source: str, rel: str, depth: int) -> list[Finding]:
    """Parse one engine file and return its findings (a syntax error is one ``syntax`` finding).

    Args:
        source: the file's text.
        rel: its path relative to the engine folder (``engine/ops.py``), for the findings.
        depth: parent hops from the file's folder to the engine folder plus one
            (``engine/__init__.py`` -> 2: ``.parent`` is ``engine/``, ``.parent.parent`` the engine folder).
    """
    try:
        tree = ast.parse(source, filename=rel)
        compile(tree, rel, "exec")
    except SyntaxError as err:
        return [Finding(rel, err.lineno, "syntax", f"does not compile: {err.msg}")]
    v = _Visitor(rel, depth)
    v.visit(tree)
    return v.findings

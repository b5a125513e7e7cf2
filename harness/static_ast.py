"""AST rules of the static stage: what engine source may not do, each finding with file and line.

KernelBench-style anti-cheat (DESIGN.md, "Style"): an engine must compute its logits itself,
from the checkpoint, with no help from the reference, the judge, the network or a file
prepared earlier. The rules, all checked on the syntax tree (nothing is executed here):

- ``forbidden-import``: ``transformers``, ``harness``, ``metainfer`` other than
  ``metainfer.checkpoint`` / ``metainfer.formats``, process and network modules, pickle and
  its kin, ``ctypes``; also ``__import__`` / ``importlib.import_module`` of such names.
- ``forbidden-call``: ``torch.load``, ``numpy.load``/``fromfile``, ``os.system``/``popen``/
  ``exec*``/``spawn*``, ``eval``/``exec``/``compile`` and ``__import__`` of computed strings,
  caller introspection (``sys._getframe``, ``inspect.stack``/``currentframe``, ``gc.get_objects``/
  ``get_referrers``, frame attributes, ``sys.modules``) that could read the judge's reference tensors.
- ``file-write``: writing, moving or deleting files anywhere (the engine writes nothing).
- ``path-escape``: an absolute path literal, a ``..`` component, or ``__file__`` climbed past the
  engine folder (``parents[i]`` / ``.parent`` chains / ``os.path.dirname`` nesting).
- ``monkeypatch``: assigning an attribute of an imported module (``torch.allclose = ...``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

FORBIDDEN_ROOTS = {
    "transformers", "harness", "subprocess", "socket", "ssl", "requests", "urllib", "urllib3", "http",
    "httpx", "aiohttp", "ftplib", "smtplib", "telnetlib", "xmlrpc", "websocket", "websockets", "grpc",
    "pickle", "cPickle", "dill", "cloudpickle", "shelve", "marshal", "joblib", "ctypes", "multiprocessing",
    "pty", "huggingface_hub", "vllm", "sglang",
    # a thread can slow the other engine of an A/B down (it shares the process); atexit/signal
    # run code after the judge's last check
    "threading", "_thread", "concurrent", "asyncio", "sched", "atexit", "signal",
}
ALLOWED_METAINFER = ("metainfer.checkpoint", "metainfer.formats")
FORBIDDEN_CALLS = {
    "torch.load", "numpy.load", "numpy.fromfile", "numpy.memmap", "torch.hub.load", "torch.save", "numpy.save",
    "os.system", "os.popen", "os.fork", "os.kill", "os.startfile",
    "sys._getframe", "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "gc.get_objects",
    "gc.get_referrers", "builtins.open",
    # open paths the bare-open rule does not see, and an exit that skips the judge's verdict
    "io.open", "io.FileIO", "os.open", "os.fdopen", "os._exit", "os.abort", "os.write", "os.pwrite",
}
#: global module hooks would see the reference model's inputs and outputs during parity
FORBIDDEN_PREFIXES = ("os.exec", "os.spawn", "os.posix_spawn", "shutil.", "torch.nn.modules.module.register_module_",
                      "torch.nn.modules.module._global_")
WRITE_CALLS = {"os.remove", "os.unlink", "os.rename", "os.replace", "os.makedirs", "os.mkdir", "os.rmdir",
               "os.chmod", "os.symlink", "os.link", "os.truncate"}
WRITE_METHODS = {"write_text", "write_bytes", "unlink", "rmdir", "touch", "mkdir", "rename", "symlink_to",
                 "hardlink_to", "chmod", "tofile", "write", "writelines"}
#: attributes the engine may not read: the judge's command line (its output path, its seed)
FORBIDDEN_ATTRS = {"sys.argv", "sys.orig_argv", "sys.modules", "builtins.__dict__"}
#: setattr on objects under these roots patches what the judge computes with
PATCH_ROOTS = {"torch", "numpy", "builtins", "math", "time", "sys", "os", "io"}
DYNAMIC_BUILTINS = {"eval", "exec", "compile", "__import__"}
#: Modules whose attributes, looked up by a computed name, would reach any import, file or process.
DYNAMIC_TARGETS = {"importlib", "builtins", "__builtins__", "sys", "os", "io", "pathlib"}
INTROSPECTION_ATTRS = {"f_back", "f_locals", "f_globals", "gi_frame", "tb_frame"}


@dataclass(frozen=True)
class Finding:
    """One rule broken: ``file`` (relative to the engine folder), ``line`` (1-based, None for the file), ``rule``, ``message``."""

    file: str
    line: int | None
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line or 0}: [{self.rule}] {self.message}"


def forbidden_module(name: str) -> str | None:
    """Why the absolute module ``name`` may not be imported by an engine, or None when it may."""
    root = name.split(".")[0]
    if root == "metainfer":
        if any(name == a or name.startswith(a + ".") for a in ALLOWED_METAINFER):
            return None
        return f"imports {name}: an engine may use only {' and '.join(ALLOWED_METAINFER)} of metainfer"
    if root in FORBIDDEN_ROOTS:
        return f"imports {name}: {root} is off limits to an engine (reference model, judge, processes, network or pickle)"
    return None


class _Visitor(ast.NodeVisitor):
    def __init__(self, rel: str, depth: int) -> None:
        self.rel, self.depth = rel, depth  # depth: parent hops from the file to the engine folder
        self.aliases: dict[str, str] = {}  # local name -> dotted module or object it stands for
        self.findings: list[Finding] = []
        self.docstrings: set[int] = set()

    def add(self, node: ast.AST, rule: str, msg: str) -> None:
        self.findings.append(Finding(self.rel, getattr(node, "lineno", None), rule, msg))

    def dotted(self, node: ast.AST) -> str | None:
        """``np.load`` -> ``numpy.load`` through the import aliases; None when not a plain dotted name."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def visit_Module(self, node: ast.Module) -> None:
        self._mark_docstrings(node)
        self.generic_visit(node)

    def _mark_docstrings(self, node: ast.AST) -> None:
        for n in ast.walk(node):
            body = getattr(n, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                self.docstrings.add(id(body[0].value))

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            if (why := forbidden_module(a.name)) is not None:
                self.add(node, "forbidden-import", why)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            if (why := forbidden_module(node.module)) is not None:
                self.add(node, "forbidden-import", why)
            for a in node.names:
                full = f"{node.module}.{a.name}"
                self.aliases[a.asname or a.name] = full
                if (why := forbidden_module(full)) is not None and forbidden_module(node.module) is None:
                    self.add(node, "forbidden-import", why)

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        if name is not None:
            self._check_call(node, name)
        if isinstance(node.func, ast.Attribute) and node.func.attr in WRITE_METHODS:
            self.add(node, "file-write", f"calls .{node.func.attr}(): an engine writes, moves or deletes no files")
        self.generic_visit(node)

    def _check_call(self, node: ast.Call, name: str) -> None:
        literal = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
        if name == "importlib.import_module" and self._relative(node):
            return  # relative to the engine package (a top-level package: it cannot climb out)
        if name in DYNAMIC_BUILTINS or name in ("importlib.import_module", "importlib.__import__"):
            if not isinstance(literal, str):
                self.add(node, "forbidden-call", f"{name}() of a computed string hides what runs; write the code or import out")
            elif name != "compile" and (why := forbidden_module(literal)) is not None:
                self.add(node, "forbidden-import", why)
        elif name in FORBIDDEN_CALLS or name.startswith(FORBIDDEN_PREFIXES):
            self.add(node, "forbidden-call", f"calls {name}: engines load weights only through metainfer.checkpoint and may not run processes or inspect their caller")
        elif name in WRITE_CALLS:
            self.add(node, "file-write", f"calls {name}: an engine writes no files")
        elif name == "open" and self._open_writes(node):
            self.add(node, "file-write", "opens a file for writing: an engine writes no files")
        if name in ("setattr", "builtins.setattr", "delattr", "builtins.delattr") and node.args:
            target = self.dotted(node.args[0])
            if target is not None and target.split(".")[0] in PATCH_ROOTS:
                self.add(node, "monkeypatch", f"{name}({target}, ...) patches a module or class the judge also uses")
        if name in ("getattr", "builtins.getattr") and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
            target = self.dotted(node.args[0])
            if target is not None and target.split(".")[0] in DYNAMIC_TARGETS:
                self.add(node, "forbidden-call", f"getattr({target}, <computed name>) hides what is called; name the function")
        if name in ("os.path.dirname",) and self._climb(node) > self.depth:
            self.add(node, "path-escape", "climbs out of the engine folder with nested os.path.dirname(__file__)")

    @staticmethod
    def _relative(node: ast.Call) -> bool:
        """True when the module name is a literal or f-string starting with '.' (a relative import)."""
        arg = node.args[0] if node.args else None
        if isinstance(arg, ast.JoinedStr) and arg.values:
            arg = arg.values[0]
        return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith(".")

    @staticmethod
    def _open_writes(node: ast.Call) -> bool:
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        if mode is None:
            return False
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
            return any(c in mode.value for c in "wax+")
        return True  # a computed mode may write

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

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self.dotted(node) in FORBIDDEN_ATTRS:
            self.add(node, "forbidden-call", f"reads {self.dotted(node)}: the judge's command line and loaded modules are off limits")
        if node.attr in INTROSPECTION_ATTRS:
            self.add(node, "forbidden-call", f"reads .{node.attr}: frame introspection could reach the judge's tensors")
        if node.attr == "parent" and self._climb(node) > self.depth:
            self.add(node, "path-escape", "climbs out of the engine folder with .parent from __file__")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.value, ast.Attribute) and node.value.attr == "parents" and self._climb(node) > self.depth:
            self.add(node, "path-escape", "climbs out of the engine folder with parents[...] of __file__")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        v = node.value
        if isinstance(v, str) and id(node) not in self.docstrings and "\n" not in v and " " not in v:
            if (v.startswith("/") and v.count("/") >= 2 and len(v) > 3) or v.startswith("~/") or v == ".." or "../" in v or v.endswith("/.."):
                self.add(node, "path-escape", f"path literal {v!r} points outside the engine folder; the engine reads only its own files and the checkpoint it is given")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            root = t
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            if isinstance(t, ast.Attribute) and isinstance(root, ast.Name) and root.id in self.aliases:
                self.add(node, "monkeypatch", f"assigns {self.dotted(t) or ast.unparse(t)}: an engine may not patch imported modules the judge also uses")
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

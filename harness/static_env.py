"""The ``env-write`` rule of the static stage: engine code reads the process environment and never changes it.

Libraries read the environment and run what it names: Inductor takes its C++ compiler from ``CXX`` at import
(``os.environ["CXX"] = "engine/cc.txt"`` made ``torch.compile`` run a shell script of the engine), and Triton,
cuDNN or NCCL read paths and programs from ``TRITON_*`` and friends. So the environment objects (``os.environ``,
``os.environb``, reached under any alias: ``from os import environ``, ``import os as o``, ``e = os.environ``, or as
an attribute ``environ`` of anything, ``__import__('os').environ``) may appear only where they are read:

- ``E.get(...)``, ``E.copy()`` (every other attribute, ``update``, ``setdefault``, ``pop``, ``__setitem__``, the
  inner ``_data``, ..., is refused);
- ``E[key]`` read, ``key in E`` / ``not in``, ``for k in E``, ``dict(E)`` / ``len(E)`` / ``sorted(E)`` ...;
- ``e = E`` (a plain alias, whose uses are checked in turn).

Anything else is refused: an item assigned, augmented or deleted (``E[k] = v``, ``del E[k]``), ``E |= {...}``, and
``E`` handed to anything as a value (``f(E)``, ``[E]``, ``MutableMapping.update(E, ...)``), where the rules cannot
follow what changes it. ``os.putenv`` / ``os.unsetenv`` (``FORBIDDEN_CALLS``), and attributes of those names on any
object, are refused as well. ``os.getenv`` stays allowed.
"""

from __future__ import annotations

import ast

from harness.static_findings import RuleVisitor
from harness.static_rules import ENV_OBJECTS, ENV_READERS, ENV_SETTERS, ENV_WHY

_ENV_ATTRS = {o.rsplit(".", 1)[1] for o in ENV_OBJECTS}
#: builtins that only read a mapping handed to them
_READING_BUILTINS = {"dict", "len", "sorted", "list", "set", "tuple", "frozenset", "bool"}


class EnvRules(RuleVisitor):
    """The environment rule of the static visitor; the visitor calls ``_environment`` on every name and attribute."""

    def _env_object(self, node: ast.AST, name: str | None) -> str | None:
        """The environment object ``node`` stands for (``os.environ``), or None."""
        if name in ENV_OBJECTS:
            return name
        if isinstance(node, ast.Attribute) and node.attr in _ENV_ATTRS:
            return name or f"<...>.{node.attr}"  # reached some other way: __import__('os').environ
        return None

    def _environment(self, node: ast.AST, name: str | None) -> None:
        """Rules on a name or attribute (``name``: its dotted resolution, None when rooted elsewhere)."""
        if isinstance(node, ast.Attribute) and node.attr in ENV_SETTERS and name != f"os.{node.attr}":  # os.putenv: FORBIDDEN_CALLS
            self.add(node, "env-write", f"uses .{node.attr}: it {ENV_WHY}")
            return
        env = self._env_object(node, name)
        if env is None:
            return
        parent = self.parents.get(id(node))
        ctx = getattr(node, "ctx", None)
        if isinstance(ctx, ast.Store):
            if isinstance(parent, ast.AugAssign):
                self.add(node, "env-write", f"augments {env} in place: that {ENV_WHY}")
            return  # rebinding the name itself (an attribute of the os module: the monkeypatch rule)
        if isinstance(ctx, ast.Del):
            return  # ``del os.environ``: the monkeypatch rule
        why = self._env_use(node, parent, env)
        if why is not None:
            self.add(node, "env-write", why)

    def _env_use(self, node: ast.AST, parent: ast.AST | None, env: str) -> str | None:
        """None when ``parent`` only reads the environment object ``node``, else the finding's message."""
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr in ENV_READERS:
                return None
            return f"uses {env}.{parent.attr} (only .get and .copy() of it are allowed): a write {ENV_WHY}"
        if isinstance(parent, ast.Subscript) and parent.value is node:
            if isinstance(parent.ctx, ast.Load):
                return None
            verb = "deletes" if isinstance(parent.ctx, ast.Del) else "sets"
            return f"{verb} an item of {env}: that {ENV_WHY}"
        if isinstance(parent, ast.Compare) and node in parent.comparators \
                and isinstance(parent.ops[parent.comparators.index(node)], (ast.In, ast.NotIn)):
            return None
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is node:
            return None
        if isinstance(parent, ast.Call) and parent.args == [node] and not parent.keywords and isinstance(parent.func, ast.Name) \
                and parent.func.id in _READING_BUILTINS and not self.bound(parent.func.id) \
                and self.resolve(parent.func.id) == parent.func.id:
            return None
        if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Name) and not self.bound(parent.targets[0].id) \
                and self.resolve(parent.targets[0].id) == env:
            return None  # ``e = os.environ``: an alias, its uses are checked where they are
        return (f"hands {env} on as a value (pass {env}.copy() or values read with .get): what it is handed to may "
                f"change it, and that {ENV_WHY}")

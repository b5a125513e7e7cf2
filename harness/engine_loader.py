"""Import an engine package from its folder under a unique module name (inside a worker process only).

The judge never imports engine code: ``harness.worker_main`` calls this in the engine's worker
process (and the static stage's audited import runs in a worker too). Each import gets its own
module name ``_mi_engine_<n>`` with its own submodules, so two imports in one process (tools,
scripts) do not share state. The caller uses only the public API (docs/CONTRACTS.md, "The engine").
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

_counter = itertools.count()


def import_engine(engine_dir: str | Path) -> ModuleType:
    """Import ``<engine_dir>/engine/__init__.py`` as a fresh package and return it.

    Args:
        engine_dir: the target folder (``generated/<target>``) holding the ``engine`` package.

    Raises:
        FileNotFoundError: no ``engine/__init__.py`` under ``engine_dir``.
        AttributeError: the package lacks ``load`` or ``SamplingParams``.
    """
    root = Path(engine_dir).resolve() / "engine"
    init = root / "__init__.py"
    if not init.is_file():
        raise FileNotFoundError(f"no engine package at {init}; render one with `metainfer render`")
    name = f"_mi_engine_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(root)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    for attr in ("load", "SamplingParams"):
        if not hasattr(module, attr):
            raise AttributeError(f"engine at {root} has no public `{attr}`; see docs/CONTRACTS.md")
    return module

"""The judge's own tools, checked for tampering by the engine it judges.

The engine runs in the gate's process (parity and bench call it directly), so an engine could
replace a function the judge then uses to compare or time it (``setattr(torch.Tensor, "norm",
...)``, ``time.perf_counter = ...``). ``snapshot()`` records the identity of every attribute of
the modules and classes the judge computes with, before the engine is imported; ``changed()``
after a stage lists what differs. A stage whose engine changed any of them is red: its figures
were computed with the engine's functions, not the judge's.
"""

from __future__ import annotations

import builtins
import math
import statistics
import sys
import time

import numpy
import torch
import torch.nn.functional

#: The namespaces the parity metrics, the reference and the bench timings go through.
WATCHED = {
    "torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": torch.nn.functional,
    "torch.linalg": torch.linalg, "torch.cuda": torch.cuda, "numpy": numpy, "math": math,
    "statistics": statistics, "time": time, "builtins": builtins,
}


def import_judge() -> None:
    """Import everything the judge computes with before the snapshot: importing transformers'
    model code replaces ``torch.manual_seed`` (seen with transformers 5.24), which is the judge's
    own doing, not the engine's."""
    import harness.bench  # noqa: F401
    import harness.parity  # noqa: F401
    import harness.reference  # noqa: F401
    import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe  # noqa: F401


def _namespaces() -> dict[str, object]:
    spaces = dict(WATCHED)
    spaces |= {name: mod for name, mod in list(sys.modules.items()) if name == "harness" or name.startswith("harness.")}
    return spaces


def snapshot() -> dict[str, dict[str, object]]:
    """``{namespace: {attribute: value}}`` for the callables (functions, methods, classes) of the
    watched modules and classes and of every loaded ``harness`` module; plain values (flags such as
    ``torch.cuda._initialized``, caches) change legitimately and are not watched."""
    return {name: {k: v for k, v in list(vars(ns).items()) if callable(v)} for name, ns in _namespaces().items()}


#: Namespaces where a *new* callable is tampering too: a class attribute shadows the one inherited
#: from a base (``setattr(torch.Tensor, "__sub__", f)`` hides ``torch._C.TensorBase.__sub__``), and
#: these modules import nothing lazily. Other modules gain submodules and helpers on first use.
STRICT = {"torch.Tensor", "builtins", "math", "time", "statistics"}


def _added(before: dict[str, dict[str, object]], now: dict[str, dict[str, object]]) -> list[str]:
    return [f"{name}.{k}" for name in STRICT & before.keys() for k in now.get(name, {}).keys() - before[name].keys()]


def changed(before: dict[str, dict[str, object]]) -> list[str]:
    """Attributes replaced or removed since ``before`` (``torch.Tensor.norm``), and new callables in
    the ``STRICT`` namespaces, sorted; new attributes of other modules are ignored (lazy imports add
    submodules)."""
    now = snapshot()
    out = _added(before, now)
    for name, attrs in before.items():
        cur = now.get(name, {})
        out += [f"{name}.{k}" for k, value in attrs.items() if cur.get(k) is not value]
    return sorted(out)


def restore(before: dict[str, dict[str, object]]) -> None:
    """Put back every attribute ``changed(before)`` would list, so later stages (and the rest of
    the process) compute with the judge's own functions again."""
    spaces = _namespaces()
    for qual in _added(before, snapshot()):
        name, _, k = qual.rpartition(".")
        delattr(spaces[name], k)
    for name, attrs in before.items():
        ns = spaces.get(name)
        if ns is None:
            continue
        for k, value in attrs.items():
            if vars(ns).get(k) is not value:
                setattr(ns, k, value)

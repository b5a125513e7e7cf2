"""Known-cheating engines the gate must reject (KernelBench ``test_eval_adversarial`` style).

Each module here is one cheat applied to a freshly rendered tiny engine. It defines
``DESCRIPTION``; ``CLASS`` (issue 10's family: ``precision``, ``in-process``, ``bench``, ``static``,
``hang``); ``STAGE`` (where it must be stopped: ``static``, ``parity``, ``bench``, ``any-red``, or
``not-accepted`` for a cheat that isolation turns into an honest, not-faster engine); ``REASON``
(a substring the red stage's error must contain, '' for none); optionally ``VERDICT``
(``fail``/``timeout``/``crashed``/``tampered``), ``BASELINE`` (``self``: the baseline is the cheat
itself, as after an earlier acceptance), ``RUNS`` (gates in a row on one judge copy); ``OLD_GATE``
(what it did to the in-process gate of eead044, recorded by hand); and ``apply(engine_dir: Path)``,
which edits the rendered copy in place. ``metainfer cheats`` runs them all through the gate
(``metainfer/attempts/``); ``tests/test_cheats.py`` is the CI run.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent


def cheats() -> list[ModuleType]:
    """Every cheat module of this folder (name order)."""
    return [importlib.import_module(f"{__name__}.{m.name}") for m in sorted(pkgutil.iter_modules([str(HERE)]), key=lambda m: m.name)
            if not m.name.startswith("_")]


def append(engine_dir: Path, rel: str, code: str) -> None:
    """Append ``code`` to the engine file ``rel`` (e.g. ``engine/__init__.py``)."""
    path = engine_dir / rel
    path.write_text(path.read_text() + "\n\n" + code.strip() + "\n")


WRAP_ENGINE = '''
_honest_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    """Load honestly, then swap the outputs (the cheat)."""
    eng = _honest_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    honest_prefill, honest_decode = eng.prefill, eng.decode

    def prefill(prompts, slots=None, *, return_hidden=False):
        res = honest_prefill(prompts, slots, return_hidden=return_hidden)
        res.logits = [_fake(lg) for lg in res.logits]
        return res

    def decode(slots, tokens):
        return _fake(honest_decode(slots, tokens))

    eng.prefill, eng.decode = prefill, decode
    return eng
'''


def replace(engine_dir: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    """Replace ``old`` by ``new`` in the engine file ``rel``; exactly ``count`` occurrences must exist (-1: at least one, all replaced).

    Raises:
        ValueError: the template changed and ``old`` is not there as expected (update the cheat).
    """
    path = engine_dir / rel
    text = path.read_text()
    n = text.count(old)
    if n == 0 or (count != -1 and n != count):
        raise ValueError(f"{rel}: expected {count} occurrence(s) of {old!r}, found {n}; the template changed, update the cheat")
    path.write_text(text.replace(old, new))


def render_tiny(out_root: Path, quant: str = "bf16") -> Path:
    """Render the ``qwen3.6-35b-a3b-tiny`` engine for the CPU into ``out_root`` and return its folder."""
    from metainfer.attempts.setup import render_tiny as render

    return render(out_root, quant)

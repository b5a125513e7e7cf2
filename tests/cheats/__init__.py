"""Known-cheating engines the gate must reject (KernelBench ``test_eval_adversarial`` style).

Each module here is one cheat applied to a freshly rendered tiny engine: it defines
``DESCRIPTION``, ``STAGE`` (the gate stage that must turn red), ``REASON`` (a substring the
stage's error must contain, naming why) and ``apply(engine_dir: Path)``, which patches the
rendered copy in place (appends to or adds files). ``CHEATS`` lists them all; the
regression suite is ``tests/test_cheats.py``.
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


def render_tiny(out_root: Path, quant: str = "bf16") -> Path:
    """Render the ``qwen3.6-35b-a3b-tiny`` engine for the CPU into ``out_root`` and return its folder."""
    from metainfer.render import render_engine
    from metainfer.targets import make_target

    return render_engine(make_target("qwen3.6-35b-a3b-tiny", quant, "cpu"), out_root, force=True)

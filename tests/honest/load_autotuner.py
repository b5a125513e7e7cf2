"""A synchronous autotuner at load: times two equivalent layouts with time.perf_counter on the calling
thread and keeps the faster (no thread: see harness/static_rules.py), plus a utf-8 coding cookie and a
non-ASCII comment."""

from pathlib import Path

from cheats import append

DESCRIPTION = "load() times two equivalent cat/repeat layouts and records the faster; utf-8 cookie kept"
OLD_GATE = "not faster"


def apply(engine_dir: Path) -> None:
    """Prepend a utf-8 cookie to engine/tunables.py and append the autotuner to engine/__init__.py."""
    tun = engine_dir / "engine" / "tunables.py"
    tun.write_text("# -*- coding: utf-8 -*-\n# tunables — read at load (non-ASCII comment on purpose)\n" + tun.read_text())
    append(engine_dir, "engine/__init__.py", '''
import time as _time


def _pick_layout(device, trials=3):
    """Time cat vs repeat of a [64, 32] table on the calling thread; return the faster name."""
    x = torch.randn(64, 32, device=device)
    variants = {"cat": lambda: torch.cat([x, x], dim=-1), "repeat": lambda: x.repeat(1, 2)}
    best, best_t = "cat", float("inf")
    for name, fn in variants.items():
        t0 = _time.perf_counter()
        for _ in range(trials):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = _time.perf_counter() - t0
        if dt < best_t:
            best, best_t = name, dt
    return best


_at_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _at_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    eng.layout = _pick_layout(eng.device)
    return eng
''')

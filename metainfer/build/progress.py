"""Progress on the terminal: one line per iteration event and per gate stage, with elapsed time.

    [iter 2 +41.0s] propose: num_warps 4→8 (neighbour of the best)
    [iter 2 +41.2s] gate static ok 0.1s
    [iter 2 +44.3s] gate parity ok 3.1s (max rel err 0.0041)
    [iter 2 +56.0s] gate bench speedup 1.040× ± 2.0 % 11.7s
    [iter 2 +56.0s] → rejected (within noise: speedup 1.040× ± 2.0 %)
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from metainfer.build.decision import figures, speedup_text


class Progress:
    """Prints progress lines to ``stream`` (stderr by default), times relative to construction."""

    def __init__(self, stream: TextIO | None = None, t0: float | None = None):
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic() if t0 is None else t0

    def line(self, iteration: int | None, text: str) -> None:
        """Print ``[iter N +T s] text`` (``[run +T s]`` without an iteration)."""
        tag = "run" if iteration is None else f"iter {iteration}"
        print(f"[{tag} +{time.monotonic() - self.t0:.1f}s] {text}", file=self.stream, flush=True)

    def gate_stage(self, iteration: int, st: dict[str, Any], result: dict[str, Any]) -> None:
        """One line for a finished gate stage (from the gate JSON), with its seconds and headline figure."""
        name, ok, secs = st.get("name"), st.get("ok"), st.get("seconds") or 0.0
        extra = ""
        f = figures(result)
        if name == "parity" and f["max_rel_err"] is not None:
            dec = f" / decode {f['max_decode_rel_err']:.3g}" if f.get("max_decode_rel_err") is not None else ""
            extra = f" (max rel err {f['max_rel_err']:.3g}{dec})"
        if name == "bench" and f["speedup"] is not None:
            extra = f" speedup {speedup_text(f['speedup'], f['noise'])}"
        status = "ok" if ok else f"FAILED: {st.get('error') or 'red'}"
        self.line(iteration, f"gate {name} {status}{extra} {secs:.1f}s")

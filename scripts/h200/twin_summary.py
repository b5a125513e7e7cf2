"""One line per twin-stage gate JSON (twin_pair.sh): verdict, seconds, and the worst layer-local update and
token-mixer figures against their thresholds (the mixer figure is what sets its CUDA threshold).

    python3 scripts/h200/twin_summary.py twin_honest.json twin_rope_slow_pairs_dropped.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def line(path: Path) -> str:
    g = json.loads(path.read_text())
    name = path.stem.removeprefix("twin_")
    stage = next((s for s in g.get("stages", []) if s["name"] == "twin"), {})
    t = g.get("twin") or {}
    local = t.get("local_update_errors") or []
    local_tol = t.get("local_update_tolerances") or []
    mixer = t.get("mixer_local_errors") or []
    mixer_tol = t.get("mixer_local_tolerance", float("nan"))
    worst_local = max(((e / tol, i, e, tol) for i, (e, tol) in enumerate(zip(local, local_tol)) if tol), default=None)
    out = [f"{name}: {stage.get('verdict')} {stage.get('seconds', 0):.0f} s"]
    if worst_local:
        r, i, e, tol = worst_local
        out.append(f"layer-local worst layers.{i} {e:.4f} / {tol:.4f} ({r:.2f})")
    if mixer:
        i = max(range(len(mixer)), key=lambda j: mixer[j])
        out.append(f"mixer per layer [{' '.join(f'{x:.4f}' for x in mixer)}] worst layers.{i} {mixer[i]:.4f}"
                   f" / {mixer_tol:.4f} ({mixer[i] / mixer_tol:.2f}){' advisory' if t.get('mixer_local_advisory') else ''}")
    if stage.get("error"):
        out.append(f"error: {stage['error'][:300]}")
    return "; ".join(out)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(line(Path(p)))

"""Write the config of a full-width, shallow twin of a registered model: every per-layer shape of the real
model (hidden 2,048, 256 experts top-8, the real head counts, vocabulary and RoPE base), but only the first
``--periods`` layer periods (3 GDN layers + 1 full-attention layer each).

Why: at full size the reference runs in bf16 (fp32 does not fit beside the engine), and HF-bf16's own cached
decode differs from its uncached forward by 0.057 there (docs/results/h200-2026-12-03-b), so a precision cut of
about bf16 size in the engine's decode path hides in that noise. One period of the real shapes is about 4.2 B
parameters: its reference runs in float32 on one H200 (``harness.reference_cache.default_reference_dtype``
picks it), with the same Triton kernels, tile shapes and expert counts as the full engine.

    python3 scripts/h200/shallow_twin.py --model qwen3.6-35b-a3b --periods 1 --out /tmp/shallow
    metainfer checkpoint --model /tmp/shallow/qwen3.6-35b-a3b-shallow1 --quant nvfp4 --out /tmp/ck-shallow
    metainfer mutants --model /tmp/shallow/qwen3.6-35b-a3b-shallow1 --gpu h200 --device cuda --checkpoint /tmp/ck-shallow

Prints the folder it wrote (its name is the model's name in metainfer: ``<model>-shallow<periods>``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from metainfer.errors import MetainferError  # noqa: E402
from metainfer.targets.models import get_model  # noqa: E402
from metainfer.targets.shallow import write_shallow_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3.6-35b-a3b", help="registered model name")
    ap.add_argument("--periods", type=int, default=1, help="layer periods to keep (4 layers each for Qwen3.5/3.6)")
    ap.add_argument("--out", type=Path, required=True, help="folder to write <model>-shallow<periods>/config.json into")
    args = ap.parse_args()
    try:
        folder = write_shallow_model(args.model, args.periods, args.out)
    except MetainferError as err:
        ap.error(str(err))
    twin = get_model(str(folder))
    counts = twin.param_count()
    print(f"{folder}  ({twin.name}: {len(twin.layer_types)} layers, {counts['total'] / 1e9:.2f} B parameters, "
          f"tiny={twin.tiny})")


if __name__ == "__main__":
    main()

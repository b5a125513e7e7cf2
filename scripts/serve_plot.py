"""Plot throughput against latency per engine from ``serve_bench.json`` files (scripts/h200/serve_bench.py).

    python3 scripts/serve_plot.py docs/results/h200-2026-12-03-d/metainfer/serve_bench.json \\
        docs/results/h200-2026-12-03-d/vllm/serve_bench.json --out docs/results/h200-2026-12-03-d/serve.png

Each engine is one line per panel: the closed-loop levels (conc1, conc32, ...) in order of concurrency, output
tok/s on y against TPOT p50 (left) and TTFT p50 (right), both in ms on a log x axis; the Poisson levels of the
mixed set are separate markers. The engine's name is the folder holding its JSON. Also prints the levels as a
markdown table (engine, level, TTFT p50/p99, TPOT p50/p99, output tok/s, failed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(paths: list[Path]) -> dict[str, list[dict]]:
    """Engine name (the JSON's folder) -> its levels, in file order."""
    return {p.parent.name: json.loads(p.read_text())["levels"] for p in paths}


def table(runs: dict[str, list[dict]]) -> str:
    rows = ["| engine | level | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | output tok/s | failed |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    for eng, levels in runs.items():
        for lv in levels:
            rows.append(f"| {eng} | {lv['name']} | {lv['ttft_p50_ms']:.1f} | {lv['ttft_p99_ms']:.1f} | {lv['tpot_p50_ms']:.2f} | "
                        f"{lv['tpot_p99_ms']:.2f} | {lv['output_tok_s']:.1f} | {lv['failed']} |")
    return "\n".join(rows)


def plot(runs: dict[str, list[dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for (eng, levels), color in zip(runs.items(), ["tab:blue", "tab:orange", "tab:green", "tab:red"]):
        closed = [lv for lv in levels if lv["name"].startswith("conc")]
        mixed = [lv for lv in levels if not lv["name"].startswith("conc")]
        for ax, key in zip(axes, ("tpot_p50_ms", "ttft_p50_ms")):
            ax.plot([lv[key] for lv in closed], [lv["output_tok_s"] for lv in closed], "o-", color=color, label=f"{eng} closed loop")
            for lv in closed:
                ax.annotate(lv["name"].split()[0], (lv[key], lv["output_tok_s"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
            if mixed:
                ax.plot([lv[key] for lv in mixed], [lv["output_tok_s"] for lv in mixed], "s", color=color, mfc="none",
                        label=f"{eng} mixed, Poisson")
                for lv in mixed:
                    ax.annotate(lv["name"].replace("mixed poisson ", ""), (lv[key], lv["output_tok_s"]), textcoords="offset points",
                                xytext=(4, -10), fontsize=7)
    for ax, label in zip(axes, ("TPOT p50 (ms)", "TTFT p50 (ms)")):
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("output tok/s")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("throughput against latency over HTTP (same client, prompts and checkpoint)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsons", nargs="+", type=Path, help="serve_bench.json files, one per engine")
    ap.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = ap.parse_args()
    runs = load(args.jsons)
    plot(runs, args.out)
    print(table(runs))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

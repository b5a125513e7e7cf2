"""The run report's plots (matplotlib, Agg backend), written as PNG files beside the pages.

- ``objective.png``: the best engine's cumulative speedup over the baseline (step line), each
  candidate's speedup against the best of its time with its measured noise as an error bar;
  accepted steps marked (green star) and labelled with their commit.
- ``workloads.png``: one panel per workload: each iteration's figure beside the best engine's it was
  raced against (error bars: the candidate's sample spread), vLLM's figure as a dashed line where
  the target has one.
- ``iter-NNN/profile.png``: per-op time of a profiled decode step / prefill and, on a GPU, the
  fraction of roofline per op.
- ``iter-NNN/layers.png``: per-layer parity errors of the prompts the gate recorded them for.
"""

from __future__ import annotations

import math
from pathlib import Path

from metainfer.build.report_data import IterationView, RunView


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    plt = _plt()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)
    return path


def objective_plot(view: RunView, path: Path) -> Path:
    """Cumulative speedup (step line) and each candidate's speedup ± noise; accepted steps starred."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    cum = [(it.iteration, it.cumulative) for it in view.iterations if it.cumulative is not None]
    if cum:
        xs, ys = zip(*cum)
        ax.step(xs, ys, where="post", color="black", lw=1.5, label="best engine (cumulative speedup over the baseline)")
    base = next((it for it in view.iterations if it.iteration == 0), None)
    if base is not None and base.noise:
        ax.axhspan(1 - base.noise, 1 + base.noise, color="grey", alpha=0.15, label=f"baseline noise run ± {base.noise:.3f}")
    for accepted, color, marker, label in ((False, "tab:red", "o", "rejected: speedup vs best ± noise"),
                                           (True, "tab:green", "*", "accepted: speedup vs best ± noise")):
        pts = [it for it in view.candidates if it.speedup is not None and it.accepted == accepted]
        if pts:
            ax.errorbar([it.iteration for it in pts], [it.speedup for it in pts], yerr=[it.noise or 0.0 for it in pts],
                        fmt=marker, color=color, ms=11 if accepted else 6, capsize=4, label=label, zorder=3)
    for it in view.candidates:
        if it.accepted and it.speedup is not None:
            ax.annotate((it.commit or "")[:8], (it.iteration, it.speedup), textcoords="offset points", xytext=(6, 6), fontsize=8)
        elif it.speedup is None:
            ax.axvline(it.iteration, color="tab:red", lw=0.6, ls=":", zorder=1)
    ax.axhline(1.0, color="grey", lw=0.6)
    ax.set_xlabel("iteration")
    ax.set_ylabel("speedup (> 1 faster)")
    ax.set_xticks([it.iteration for it in view.iterations] or [0])
    ax.set_title("objective over iterations" + (" (CPU, scaled-down workloads)" if view.scaled_down else ""))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=7)
    else:
        ax.text(0.5, 0.5, "no candidate measured yet", transform=ax.transAxes, ha="center", color="grey")
    fig.tight_layout()
    return _save(fig, path)


def workloads_plot(view: RunView, path: Path) -> Path | None:
    """Per workload: each iteration's candidate figure and the best engine's figure it was compared with; None if no figures."""
    names = view.workload_names
    if not names:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), dpi=100, squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = [(it, w) for it in view.iterations for w in it.workloads if w.name == name and w.candidate is not None]
        if not rows:
            ax.set_visible(False)
            continue
        xs = [it.iteration for it, _ in rows]
        cand = [w.candidate for _, w in rows]
        half = [(w.spread or 0.0) * w.candidate / 2 for _, w in rows]  # spread = range / median
        err = [[min(h, c) for h, c in zip(half, cand)], half]  # a figure is never below 0: the low bar stops there
        colors = ["tab:green" if it.accepted else ("grey" if it.iteration == 0 else "tab:red") for it, _ in rows]
        ax.bar([x - 0.2 for x in xs], cand, width=0.4, color=colors, yerr=err, capsize=3, label="candidate")
        best = [(it.iteration, w.best) for it, w in rows if w.best is not None]
        if best:
            ax.bar([x + 0.2 for x, _ in best], [b for _, b in best], width=0.4, color="lightsteelblue", label="best it raced")
        vllm = rows[0][1].vllm
        if vllm is not None:
            ax.axhline(vllm, color="purple", ls="--", lw=1, label=f"vLLM {vllm:.4g}")
        unit = rows[0][1].unit
        better = "higher" if rows[0][1].higher_is_better else "lower"
        ax.set_title(f"{name} ({unit}, {better} is better)", fontsize=9)
        ax.set_xticks(xs)
        ax.set_xlabel("iteration")
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return _save(fig, path)


def profile_plot(it: IterationView, path: Path) -> Path | None:
    """Per-op milliseconds (and on a GPU fraction of roofline) of the gate's profile; None without one."""
    if not it.profile:
        return None
    plt = _plt()
    rows = it.profile[:24]
    roof = [r for r in rows if r.roofline_fraction is not None]
    ncols = 2 if roof else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 0.3 * len(rows) + 1.5), dpi=100, squeeze=False)
    labels = [f"{r.phase}: {r.op}" for r in rows]
    ax = axes[0][0]
    ax.barh(range(len(rows)), [r.ms for r in rows], color="tab:blue")
    ax.set_yticks(range(len(rows)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.set_title("time per op", fontsize=9)
    if roof:
        ax2 = axes[0][1]
        ax2.barh(range(len(rows)), [r.roofline_fraction or 0.0 for r in rows], color="tab:orange")
        ax2.set_yticks(range(len(rows)), ["" for _ in rows])
        ax2.invert_yaxis()
        ax2.set_xlim(0, 1)
        ax2.set_xlabel("fraction of roofline")
        ax2.set_title("roofline", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def layers_plot(it: IterationView, path: Path) -> Path | None:
    """Per-layer relative error of each recorded prompt (log scale); None when the gate recorded none."""
    if not it.layer_errors:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
    def peak(row) -> float:  # a prompt's largest finite error (NaN counts as the largest: it must show)
        return max((float("inf") if e is not None and not math.isfinite(e) else (e or 0.0)) for e in row[1]) if row[1] else 0.0

    shown = sorted(it.layer_errors, key=peak, reverse=True)[:8]  # a legend of 8 stays readable: the 8 worst prompts
    for name, errs in shown:
        ys = [e if e is not None and math.isfinite(e) and e > 0 else float("nan") for e in errs]
        ax.plot(range(len(ys)), ys, marker=".", lw=1, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("hidden state after layer i (0 = embeddings)")
    ax.set_ylabel("relative error vs HF")
    n = len(it.layer_errors)
    ax.set_title("per-layer parity error" + (f", the {len(shown)} worst of {n} prompts" if n > len(shown) else ""), fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)

"""Human-readable run records: ``report.md`` per iteration, ``summary.md``, ``summary.html`` and ``objective.png``.

The objective plotted is the cumulative speedup over the baseline (the product of the
accepted iterations' A/B speedups), with each candidate's own speedup against the best
engine of its time as a point (green accepted, red rejected).
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from metainfer.build.records import RunRecord, write_text


def _num(x: Any, fmt: str = ".3g") -> str:
    """``x`` formatted, or an en dash when absent."""
    return "–" if x is None else format(x, fmt)


def _workload(f: dict | None, name: str) -> str:
    w = ((f or {}).get("workloads") or {}).get(name)
    return "–" if not w or w.get("candidate") is None else f"{w['candidate']:.4g} {w.get('unit') or ''}".strip()


def iteration_markdown(target: str, run_id: str, r: dict[str, Any]) -> str:
    """The ``report.md`` of one iteration from its ``report.json`` dict."""
    f = r.get("figures") or {}
    verdict = "ACCEPTED" if r["accepted"] else "rejected"
    lines = [f"# {target} · run {run_id} · iteration {r['iteration']}", "",
             f"**{verdict}**: {r['reason']}", "", f"Change: {r['summary']}", ""]
    if r.get("expected_gain"):
        lines += [f"Expected: {r['expected_gain']}", ""]
    if r.get("commit"):
        lines += [f"Commit: `{r['commit']}`", ""]
    lines += ["| figure | value |", "|---|---|",
              f"| parity max rel err | {_num(f.get('max_rel_err'))} (tolerance {_num(f.get('tolerance'))}) |",
              f"| parity max decode rel err | {_num(f.get('max_decode_rel_err'))} (tolerance {_num(f.get('decode_tolerance'))}) |",
              f"| speedup vs best | {_num(f.get('speedup'), '.4f')} ± {_num(f.get('noise'), '.4f')} |",
              f"| cumulative speedup | {_num(r.get('cumulative_speedup'), '.4f')} |",
              f"| roofline fraction | {_num(f.get('roofline_fraction'))} |"]
    for name, w in (f.get("workloads") or {}).items():
        lines.append(f"| {name} ({w.get('unit')}) | {_num(w.get('candidate'), '.4g')} vs best {_num(w.get('baseline'), '.4g')} "
                     f"(spread {_num(w.get('spread'), '.3g')}) |")
    if f.get("scaled_down"):
        lines += ["", "Workloads ran **scaled down** for the CPU; the figures are not GPU figures."]
    g = r.get("gate")
    if g:
        lines += ["", f"Gate: {'green' if g['ok'] else 'red'} in {g['seconds']}s, seed {r.get('gate_seed')}"
                  + (" (timed out)" if g.get("timed_out") else "")]
        lines += [f"- {st['name']}: {'ok' if st['ok'] else 'FAILED'} {_num(st.get('seconds'), '.1f')}s"
                  + (f" — {st['error']}" if st.get("error") else "") for st in g["stages"]]
    if r.get("tunables"):
        lines += ["", "Tunables: " + ", ".join(f"`{k}={v}`" for k, v in r["tunables"].items())]
    if r.get("changed_paths"):
        lines += ["", "Files: " + ", ".join(f"`{p}`" for p in r["changed_paths"])]
    if r.get("error"):
        lines += ["", "Error:", "", "```", r["error"].rstrip(), "```"]
    lines += ["", f"Agent {r.get('agent_seconds', 0)}s, ${r.get('cost_usd') or 0:.2f}. Files here: candidate.diff, gate.json, "
              "gate.log, transcript.json.", ""]
    return "\n".join(lines)


def summary_table(history: list[dict[str, Any]]) -> str:
    """A markdown table with one row per iteration."""
    rows = ["| iter | verdict | change | parity err | speedup ± noise | cumulative | ttft | decode-bs1 | conc32 | reason |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in history:
        f = r.get("figures") or {}
        sp = "–" if f.get("speedup") is None else f"{f['speedup']:.3f} ± {f.get('noise') or 0:.3f}"
        verdict = ("**accepted** " + (r.get("commit") or "")[:8]) if r["accepted"] else "rejected"
        change = r["summary"].replace("|", "\\|")[:70]
        rows.append(f"| {r['iteration']} | {verdict} | {change} | {_num(f.get('max_rel_err'))} | {sp} | "
                    f"{_num(r.get('cumulative_speedup'), '.3f')} | {_workload(f, 'ttft')} | {_workload(f, 'decode-bs1')} | "
                    f"{_workload(f, 'conc32')} | {r['reason'].replace('|', '/')[:90]} |")
    return "\n".join(rows)


def summary_markdown(record: RunRecord) -> str:
    """``summary.md``: the run's header, status and the iteration table."""
    st, history = record.state, record.history()
    best = st.get("best") or {}
    scaled = any((r.get("figures") or {}).get("scaled_down") for r in history)
    lines = [f"# metainfer build: {st['target']}", "",
             f"- run: `{st['run_id']}`, agent `{st['agent']}`, seed {st['seed']}, branch `{st.get('branch')}`",
             f"- status: **{st['status']}** ({st.get('stop_reason') or 'running'}); started {st['started']}, "
             f"ended {st.get('ended') or '–'}, active {st.get('active_seconds', 0):.0f}s, cost ${st.get('cost_usd', 0):.2f}",
             f"- best: iteration {best.get('iteration', '–')}, commit `{(best.get('commit') or '–')[:12]}`, "
             f"cumulative speedup {_num(best.get('cumulative_speedup'), '.3f')} over the baseline",
             f"- accepted {sum(r['accepted'] for r in history if r['iteration'] > 0)} of "
             f"{sum(1 for r in history if r['iteration'] > 0)} candidates", ""]
    if scaled:
        lines += ["Benchmarks ran **scaled down** (CPU workloads); figures are not GPU figures.", ""]
    lines += [summary_table(history), ""]
    return "\n".join(lines)


def objective_png(history: list[dict[str, Any]]) -> bytes:
    """The plot: cumulative speedup (line) and each candidate's speedup vs the best (points), PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    its = [r["iteration"] for r in history if r.get("cumulative_speedup") is not None]
    cum = [r["cumulative_speedup"] for r in history if r.get("cumulative_speedup") is not None]
    ax.step(its, cum, where="post", color="black", label="best (cumulative speedup)")
    for r in history:
        sp = (r.get("figures") or {}).get("speedup")
        if sp is not None and r["iteration"] > 0:
            ax.scatter([r["iteration"]], [sp], color="tab:green" if r["accepted"] else "tab:red", zorder=3)
    ax.axhline(1.0, color="grey", lw=0.5)
    ax.set_xlabel("iteration")
    ax.set_ylabel("speedup")
    ax.set_title("objective over iterations (points: candidate vs best; green accepted)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def write_summary(record: RunRecord) -> Path:
    """Write ``summary.md``, ``objective.png`` and ``summary.html`` (the plot embedded) and return the HTML's path."""
    md = summary_markdown(record)
    write_text(record.path / "summary.md", md)
    png = objective_png(record.history())
    (record.path / "objective.png").write_bytes(png)
    rows = []
    for r in record.history():
        link = f"iter-{r['iteration']:03d}/report.md"
        rows.append(f"<li><a href='{link}'>iteration {r['iteration']}</a>: "
                    f"{'accepted' if r['accepted'] else 'rejected'} — {html.escape(r['summary'])} ({html.escape(r['reason'])})</li>")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(record.state['target'])}</title></head><body>"
            f"<img alt='objective over iterations' src='data:image/png;base64,{base64.b64encode(png).decode()}'/>"
            f"<pre>{html.escape(md)}</pre><ul>{''.join(rows)}</ul></body></html>\n")
    out = record.path / "summary.html"
    write_text(out, page)
    return out

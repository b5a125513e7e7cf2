"""Human-readable run records: ``report.md`` per iteration, ``summary.md``, and the HTML report.

The markdown is for terminals and git diffs; the HTML report (``summary.html``, one
``iter-NNN/report.html`` per iteration, plots as PNG files) is written by
``metainfer.build.report_html``. The objective is the cumulative speedup over the baseline
(the product of the accepted iterations' A/B speedups).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metainfer.build.decision import noise_run_note, speedup_text
from metainfer.build.records import RunRecord, write_text


def _num(x: Any, fmt: str = ".3g") -> str:
    """``x`` formatted, or an en dash when absent."""
    return "–" if x is None else format(x, fmt)


def _workload(f: dict | None, name: str) -> str:
    """``candidate vs best unit`` of one workload (the best engine's figure it was raced against beside it)."""
    w = ((f or {}).get("workloads") or {}).get(name)
    if not w or w.get("candidate") is None:
        return "–"
    return f"{w['candidate']:.4g} vs {_num(w.get('baseline'), '.4g')} {w.get('unit') or ''}".strip()


def verdict_label(r: dict[str, Any]) -> str:
    """``baseline``, ``BASELINE FAILED``, ``ACCEPTED`` or ``rejected`` for a ``report.json`` dict."""
    if r["iteration"] == 0:
        return "baseline" if r["accepted"] else "BASELINE FAILED"
    return "ACCEPTED" if r["accepted"] else "rejected"


def iteration_markdown(target: str, run_id: str, r: dict[str, Any]) -> str:
    """The ``report.md`` of one iteration from its ``report.json`` dict."""
    f = r.get("figures") or {}
    verdict = verdict_label(r)
    lines = [f"# {target} · run {run_id} · iteration {r['iteration']}", "",
             f"**{verdict}**: {r['reason']}", "", f"Change: {r['summary']}", ""]
    if r.get("expected_gain"):
        lines += [f"Expected: {r['expected_gain']}", ""]
    if r.get("commit"):
        lines += [f"Commit: `{r['commit']}`", ""]
    lines += ["| figure | value |", "|---|---|",
              f"| parity max rel err | {_num(f.get('max_rel_err'))} (tolerance {_num(f.get('tolerance'))}) |",
              f"| parity max decode rel err | {_num(f.get('max_decode_rel_err'))} (tolerance {_num(f.get('decode_tolerance'))}) |",
              *(f"| parity: {c['check']} | {c['figure']:.3g} (threshold {c['threshold']:.3g}: {c['figure'] / c['threshold']:.2f} of it) |"
                for c in f.get("sharp") or []),
              f"| speedup vs best | {speedup_text(f.get('speedup'), f.get('noise'), '.4f')} |",
              f"| cumulative speedup | {_num(r.get('cumulative_speedup'), '.4f')} |",
              f"| roofline fraction | {'n/a (CPU)' if f.get('scaled_down') else _num(f.get('roofline_fraction'))} |"]
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
    rows = ["| iter | verdict | change | parity err | speedup ± noise | cumulative | ttft (vs best) | decode-bs1 (vs best) "
            "| conc32 (vs best) | reason |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in history:
        f = r.get("figures") or {}
        sp = speedup_text(f.get("speedup"), f.get("noise"))
        verdict = verdict_label(r)
        if r["accepted"] and r["iteration"] > 0:
            verdict = "**accepted** " + (r.get("commit") or "")[:8]
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
             f"{sum(1 for r in history if r['iteration'] > 0)} candidates"]
    if st.get("resumed"):
        n = len(st["resumed"])
        lines.append(f"- resumed {n} time{'' if n == 1 else 's'}: {', '.join(map(str, st['resumed']))}")
    lines.append("")
    if scaled:
        lines += ["Benchmarks ran **scaled down** (CPU workloads); figures are not GPU figures.", ""]
    try:
        note = noise_run_note(json.loads((record.path / "iter-000" / "gate.json").read_text()))
    except (OSError, ValueError):
        note = None
    if note:
        lines += [note, ""]
    lines += [summary_table(history), ""]
    return "\n".join(lines)


def write_summary(record: RunRecord) -> Path:
    """Write ``summary.md`` and the HTML report (``summary.html``, ``iter-NNN/report.html``, plots); return the HTML's path."""
    from metainfer.build.report_html import write_html_report

    write_text(record.path / "summary.md", summary_markdown(record))
    return write_html_report(record)


def write_summary_safely(record: RunRecord, say) -> Path | None:
    """``write_summary``, but a report that cannot be written (a template edited under a running build, a full disk)
    is reported through ``say(text)`` and never ends the run: the records it is made from are already on disk."""
    try:
        return write_summary(record)
    except Exception as err:
        say(f"could not write the report: {type(err).__name__}: {err}; `metainfer report {record.run_id}` writes it again")
        return None

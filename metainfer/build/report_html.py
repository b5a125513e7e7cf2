"""The run report as HTML: ``summary.html`` (the run page) and ``iter-NNN/report.html`` (one page per iteration),
rendered with jinja2 from ``templates/report/``, plots beside them as PNG files, diffs highlighted with pygments.

Every link on a page is relative and points at a file written here or present in the record,
so a run folder can be copied, committed or opened from anywhere (``file://``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jinja2

from metainfer.build.records import RunRecord, write_text
from metainfer.build.report_data import IterationView, RunView, run_view
from metainfer.build.report_plots import layers_plot, objective_plot, profile_plot, workloads_plot

#: the templates folder of this checkout (``templates/report/``)
TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "report"
#: diffs larger than this many characters are shown truncated on the page (the full file is linked)
MAX_DIFF_CHARS = 300_000
#: iteration 0 (the render) with a diff longer than this is shown as a table of its files
RENDER_DIFF_CHARS = 20_000
#: lines of gate.log shown on the page (the last ones; the full file is linked)
LOG_TAIL_LINES = 300


def num(x: Any, fmt: str = ".3g") -> str:
    """``x`` formatted with ``fmt``; an en dash for None, ``nan`` for NaN."""
    if x is None:
        return "–"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return format(x, fmt)


def pct(x: Any, fmt: str = ".1f") -> str:
    """A relative figure (0.056) as a percentage (``5.6 %``); an en dash for None, ``nan`` for NaN."""
    if x is None:
        return "–"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{format(100 * x, fmt)} %"


def _env() -> jinja2.Environment:
    if not (TEMPLATES / "run.html.j2").is_file():
        raise FileNotFoundError(f"report templates missing: {TEMPLATES}/run.html.j2; run metainfer from a full clone")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["num"] = num
    env.filters["pct"] = pct
    return env


def highlight_diff(text: str) -> tuple[str, str, bool]:
    """``(html, css, truncated)``: the diff highlighted by pygments' DiffLexer (unified, line numbers)."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import DiffLexer

    truncated = len(text) > MAX_DIFF_CHARS
    if truncated:
        text = text[:MAX_DIFF_CHARS].rsplit("\n", 1)[0] + "\n"
    fmt = HtmlFormatter(cssclass="diff", linenos="table", wrapcode=True)
    return highlight(text, DiffLexer(), fmt), fmt.get_style_defs(".diff"), truncated


def diff_files(text: str) -> list[tuple[str, int, int]]:
    """``(path, lines added, lines removed)`` per file of a unified git diff, in its order."""
    out: list[list] = []
    for line in text.splitlines():
        if line.startswith("diff --git "):
            out.append([line.split(" b/", 1)[-1], 0, 0])
        elif out and line.startswith("+") and not line.startswith("+++ "):
            out[-1][1] += 1
        elif out and line.startswith("-") and not line.startswith("--- "):
            out[-1][2] += 1
    return [(p, a, r) for p, a, r in out]


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _transcript(d: Path) -> list[dict[str, str]]:
    """The agent transcript as ``[{"role", "text"}]`` blocks (any JSON shape: lists of turns or one object)."""
    raw = _read(d / "transcript.json")
    if raw is None:
        return []
    try:
        data = json.loads(raw)
    except ValueError:
        return [{"role": "raw", "text": raw}]
    turns = data.get("transcript") if isinstance(data, dict) and "transcript" in data else data
    if not isinstance(turns, list):
        turns = [turns]
    out = []
    for t in turns:
        if isinstance(t, dict) and "role" in t:
            content = t.get("content")
            text = content if isinstance(content, str) else json.dumps(content, indent=2, default=str)
            out.append({"role": str(t["role"]), "text": text})
        else:
            out.append({"role": "step", "text": json.dumps(t, indent=2, default=str)})
    if isinstance(data, dict) and data.get("error"):
        out.append({"role": "error", "text": str(data["error"])})
    return out


def write_iteration_page(env: jinja2.Environment, view: RunView, it: IterationView, d: Path) -> Path:
    """``iter-NNN/report.html`` with its plots (``profile.png``, ``layers.png`` when there is data)."""
    plots = {}
    for name, fn in (("profile", profile_plot), ("layers", layers_plot)):
        p = fn(it, d / f"{name}.png")
        if p is not None:
            plots[name] = p.name
    diff_text = _read(d / "candidate.diff") or ""
    # iteration 0's diff is the whole rendered engine: a file table, not pages of added lines (candidate.diff has it)
    files = diff_files(diff_text) if it.iteration == 0 and len(diff_text) > RENDER_DIFF_CHARS else []
    diff_html, diff_css, truncated = highlight_diff(diff_text) if diff_text.strip() and not files else ("", "", False)
    log = _read(d / "gate.log")
    log_lines = log.splitlines() if log else []
    neighbours = {x.iteration: x for x in view.iterations}
    page = env.get_template("iteration.html.j2").render(
        run=view, it=it, plots=plots, diff_html=diff_html, diff_css=diff_css, diff_truncated=truncated, diff_files=files,
        log_tail="\n".join(log_lines[-LOG_TAIL_LINES:]), log_skipped=max(0, len(log_lines) - LOG_TAIL_LINES),
        transcript=_transcript(d), agent_error=_read(d / "agent_error.txt"),
        prev=neighbours.get(it.iteration - 1), next=neighbours.get(it.iteration + 1))
    out = d / "report.html"
    write_text(out, page)
    return out


def _page_stale(d: Path, i: int) -> bool:
    """True when ``iter-NNN/report.html`` is missing or older than its own record files, the neighbours' reports
    (its previous/next links), this module or the templates."""
    page = d / "report.html"
    if not page.is_file():
        return True
    inputs = [d / "report.json", d / "gate.json", d / "candidate.diff", d / "transcript.json", Path(__file__),
              *TEMPLATES.glob("*.j2"), *(d.parent / f"iter-{k:03d}" / "report.json" for k in (i - 1, i + 1) if k >= 0)]
    newest = max((f.stat().st_mtime for f in inputs if f.is_file()), default=0.0)
    return page.stat().st_mtime < newest


def write_html_report(record: RunRecord) -> Path:
    """Write the whole HTML report of ``record`` (run page, iteration pages, plots); return ``summary.html``'s path."""
    env = _env()
    view = run_view(record)
    plots = {"objective": "objective.png"}
    inputs = [*record.path.glob("iter-[0-9][0-9][0-9]/report.json"), Path(__file__).with_name("report_plots.py")]
    newest = max((f.stat().st_mtime for f in inputs), default=0.0)
    obj, wl = record.path / "objective.png", record.path / "workloads.png"
    if not obj.is_file() or obj.stat().st_mtime < newest:  # plots are redrawn only when a record changed
        objective_plot(view, obj)
        if workloads_plot(view, wl) is None:
            wl.unlink(missing_ok=True)
    if wl.is_file():
        plots["workloads"] = wl.name
    for it in view.iterations:
        d = record.path / it.dirname
        if not _page_stale(d, it.iteration):
            continue  # the loop rewrites the report after every iteration: earlier pages are kept as they are
        write_iteration_page(env, view, it, d)
    page = env.get_template("run.html.j2").render(run=view, plots=plots)
    out = record.path / "summary.html"
    write_text(out, page)
    return out

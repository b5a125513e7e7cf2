"""The upgrade report: ``upgrade.json``, ``upgrade.md`` and ``upgrade.html`` in the upgrade's run folder.

Sections: what was upgraded to what (branches, commits, status); the facts diff with each change's
class (and for ``beyond`` what must be written); every carried iteration with kept / repaired /
dropped, its attempts and their gate figures; the old and the new engine's figures side by side
(the old from its branch head's commit trailers, the new from the upgrade's gates; CPU figures of
different gate runs are not A/B comparable, which the report says).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import git

from metainfer.build.decision import parse_trailers
from metainfer.build.records import RunRecord, write_json, write_text

#: figure -> commit trailer (docs/CONTRACTS.md) and workload name in the gate figures
FIGURES = (("parity max rel err", "Parity-Max-Rel-Err", None), ("ttft ms", "TTFT-ms", "ttft"),
           ("decode-bs1 tok/s", "Decode-BS1-Tok-S", "decode-bs1"), ("conc32 tok/s", "Conc32-Tok-S", "conc32"))


def _old_figures(root: Path, up: dict[str, Any]) -> dict[str, Any]:
    """Figures of the old engine: its head commit's trailers, and the product of its accepted speedups."""
    try:
        repo = git.Repo(root)
        head = repo.commit(up["from"]["commit"])
        tr = parse_trailers(head.message)
        cum = 1.0
        for c in up["carry"]:
            cum *= c.get("old_speedup") or 1.0
    except (git.BadName, ValueError, git.GitCommandError):
        return {}
    out = {label: tr.get(key) for label, key, _ in FIGURES}
    out["cumulative speedup over its baseline"] = f"{cum:.3f}"
    return out


def _new_figures(rec: RunRecord) -> dict[str, Any]:
    """Figures of the new engine: the best iteration's gate (candidate medians) and the run's cumulative speedup."""
    st = rec.state
    best = st.get("best")
    if not best:
        return {}
    f = rec.path / f"iter-{best['iteration']:03d}" / "report.json"
    figs = (json.loads(f.read_text()).get("figures") or {}) if f.is_file() else {}
    out: dict[str, Any] = {}
    for label, _, workload in FIGURES:
        if workload is None:
            v = figs.get("max_rel_err")
        else:
            v = ((figs.get("workloads") or {}).get(workload) or {}).get("candidate")
        out[label] = None if v is None else f"{v:.4g}"
    out["cumulative speedup over its baseline"] = f"{best['cumulative_speedup']:.3f}"
    return out


def upgrade_data(rec: RunRecord, root: Path) -> dict[str, Any]:
    """Everything the report shows, as plain data (``upgrade.json``)."""
    st = rec.state
    up = st["upgrade"]
    return {"run_id": st["run_id"], "kind": st.get("kind", "upgrade"), "status": st["status"], "stop_reason": st.get("stop_reason"),
            "from": up["from"], "to": up["to"], "facts_diff": up["facts_diff"], "phase": up["phase"],
            "carried": [{k: e.get(k) for k in ("commit", "summary", "old_speedup", "status", "attempts", "reasons")}
                        for e in up["carry"]],
            "figures": {"old": _old_figures(root, up), "new": _new_figures(rec)},
            "beyond": [c for c in up["facts_diff"]["changes"] if c["cls"] == "beyond"],
            "new_branch_head": st.get("best", {}).get("commit") if st.get("best") else None}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "–" if v is None else str(v)


def upgrade_markdown(d: dict[str, Any]) -> str:
    """The report as markdown."""
    f, t, fd = d["from"], d["to"], d["facts_diff"]
    if d["kind"] == "reweigh":
        head = [f"# metainfer upgrade, new weights: {f['target']} on {t['model_source']}", "",
                f"- run `{d['run_id']}`: **{d['status']}** ({d['stop_reason'] or 'running'})",
                f"- the engine of `{f['branch']}` at `{f['commit'][:10]}` (facts {f['facts_digest']}), re-gated on the "
                f"checkpoint `{t['model_source']}` (facts {t['facts_digest']}); nothing re-rendered or committed"]
    else:
        head = [f"# metainfer upgrade: {f['target']} → {t['target']}", "",
                f"- run `{d['run_id']}`: **{d['status']}** ({d['stop_reason'] or 'running'})",
                f"- from `{f['branch']}` at `{f['commit'][:10]}` (facts {f['facts_digest']}); never changed by the upgrade",
                f"- to `{t['branch']}` (facts {t['facts_digest']}, model `{t['model_source']}`)"
                + (f", head `{d['new_branch_head'][:10]}`" if d.get("new_branch_head") else "")]
    out = head + ["", f"## Facts diff: {fd['class']}", ""]
    if fd["changes"]:
        out += ["| fact | old | new | class | re-tune / must write |", "|---|---|---|---|---|"]
        out += [f"| {c['field']} | {_cell(c['old'])} | {_cell(c['new'])} | {c['cls']} | "
                f"{_cell(c.get('needs') or ', '.join(c.get('tunables') or ()))} |" for c in fd["changes"]]
    else:
        out.append("No fact the template reads differs.")
    if d["beyond"]:
        out += ["", "## Beyond the template: what the agent must write", ""]
        out += [f"- **{c['field']}** ({_cell(c['old'])} → {_cell(c['new'])}): {c['needs']}" for c in d["beyond"]]
        out += ["", f"Nothing was rendered and no branch was made; `{f['branch']}` and its {len(d['carried'])} accepted "
                "iteration(s) are as they were. Once the template can express these facts, run the same upgrade again."]
    out += ["", "## Carried iterations", ""]
    if d["carried"]:
        out += ["| old commit | summary | old speedup | result | attempts (iteration: reason; parity err; speedup) |",
                "|---|---|---|---|---|"]
        for e in d["carried"]:
            tries = "<br>".join(f"{a['iteration']} {a['kind']}: {_cell(a['reason'])}; "
                                f"{_fmt((a.get('figures') or {}).get('max_rel_err'))}; {_fmt((a.get('figures') or {}).get('speedup'))}"
                                for a in e.get("attempts") or [])
            out.append(f"| `{e['commit'][:10]}` | {_cell(e['summary'])} | {_fmt(e.get('old_speedup'))} | **{e['status']}** | "
                       f"{tries or '–'} |")
    else:
        out.append("The old branch has no accepted iteration after its render.")
    old, new = d["figures"]["old"], d["figures"]["new"]
    out += ["", "## Old and new engine", "", "| figure | old engine | new engine |", "|---|---|---|"]
    out += [f"| {k} | {_fmt(old.get(k))} | {_fmt(new.get(k))} |" for k in dict.fromkeys([*old, *new])]
    out += ["", "Old figures are the old branch head's commit trailers; new ones the upgrade's best gate. They come "
            "from different gate runs (and models): compare them as orders of magnitude, not as an A/B result."]
    return "\n".join(out) + "\n"


def _cell(v: Any) -> str:
    text = json.dumps(v) if isinstance(v, (list, dict)) else _fmt(v)
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= 160 else text[:157] + "..."


def upgrade_html(md: str, d: dict[str, Any]) -> str:
    """A standalone HTML page of the report (markdown tables as HTML tables, the rest as paragraphs)."""
    body, table = [], []

    def flush() -> None:
        if table:
            rows = [r.strip("|").split(" | ") for r in table if not set(r) <= set("|-")]
            head, rest = rows[0], rows[1:]
            body.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in head) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{html.escape(c).replace('&lt;br&gt;', '<br>')}</td>" for c in r)
                                  + "</tr>" for r in rest) + "</table>")
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("- "):
            body.append(f"<p>• {html.escape(line[2:])}</p>")
        elif line.strip():
            body.append(f"<p>{html.escape(line)}</p>")
    flush()
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.3em .6em;vertical-align:top}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>upgrade {html.escape(d['run_id'])}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def write_upgrade_report(rec: RunRecord, root: Path) -> Path:
    """Write ``upgrade.json``, ``upgrade.md`` and ``upgrade.html`` into the run folder; return the markdown path."""
    d = upgrade_data(rec, root)
    md = upgrade_markdown(d)
    write_json(rec.path / "upgrade.json", d)
    write_text(rec.path / "upgrade.md", md)
    write_text(rec.path / "upgrade.html", upgrade_html(md, d))
    return rec.path / "upgrade.md"

"""The run report's view model: typed rows built from a run's records (``run.json``, ``iter-NNN/report.json``,
``iter-NNN/gate.json``), so the HTML templates and the plots read fields, never raw JSON.

Every figure is optional (None): an iteration rejected before its gate, an old record or a gate
killed mid-way still renders. Units: workload figures in the workload's own unit (``ms`` for
``ttft``, ``tok/s`` otherwise); ratios are "> 1 is better" for every workload (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metainfer.build.decision import as_float, noise_run_note, sharp_parity
from metainfer.build.records import RunRecord

WORKLOAD_ORDER = ("ttft", "decode-bs1", "conc32", "conc64", "conc128", "ttft-2k", "ttft-8k", "prefill-16k")


@dataclass
class WorkloadFigure:
    """One workload of one gate run: the candidate's median beside the best engine's it was raced against.

    Attributes:
        name, unit, higher_is_better: from the gate JSON.
        candidate, best: medians of the A/B rounds (None when not measured).
        ratio: paired speedup, > 1 better; noise: its half relative range (the gate's ``noise``).
        spread: the candidate's relative range of samples.
        roofline_fraction: the candidate's fraction of roofline, None on the CPU (meaningless there).
        vllm: the vLLM figure for the same target and workload from ``docs/results/*/vllm.json``, or None.
    """

    name: str
    unit: str
    higher_is_better: bool
    candidate: float | None
    best: float | None
    ratio: float | None
    noise: float | None
    spread: float | None
    roofline_fraction: float | None
    vllm: float | None = None


@dataclass
class StageView:
    """One gate stage: name, ok, verdict word (``pass``/``fail``/``timeout``/``crashed``/``tampered``), seconds, error."""

    name: str
    ok: bool
    verdict: str
    seconds: float | None
    error: str | None


@dataclass
class SharpCheck:
    """One sharp parity check, the worst of its kind (``decision.sharp_parity``): its figure and threshold (relative
    L2, unitless); ``fraction`` = figure / threshold, under 1 to pass."""

    check: str
    figure: float
    threshold: float

    @property
    def fraction(self) -> float:
        return self.figure / self.threshold


@dataclass
class KernelRow:
    """One op group of a gate profile: milliseconds per step, calls and (on a GPU) fraction of roofline."""

    phase: str
    op: str
    ms: float
    calls: int | None
    roofline_fraction: float | None


@dataclass
class IterationView:
    """One iteration as the report shows it.

    Attributes:
        verdict: ``baseline``, ``baseline failed``, ``accepted`` or ``rejected``; css: its style class.
        layer_errors: ``(prompt name, [relative error per layer])`` when the gate recorded them.
        sharp: the sharp parity checks (layer-local, lm_head, consistency), the worst of each kind.
        files: names of the raw record files present in ``iter-NNN/`` (the page links only to these).
    """

    iteration: int
    verdict: str
    css: str
    summary: str
    expected_gain: str
    reason: str
    commit: str | None
    accepted: bool
    max_rel_err: float | None
    tolerance: float | None
    max_decode_rel_err: float | None
    decode_tolerance: float | None
    speedup: float | None
    noise: float | None
    cumulative: float | None
    workloads: list[WorkloadFigure]
    stages: list[StageView]
    gate_seconds: float | None
    gate_error: str | None
    cost_usd: float
    tokens: dict[str, Any]
    agent_seconds: float
    error: str | None
    changed_paths: list[str]
    tunables: dict[str, Any] | None
    scaled_down: bool
    on_cpu: bool
    env: dict[str, Any]
    layer_errors: list[tuple[str, list[float]]] = field(default_factory=list)
    sharp: list[SharpCheck] = field(default_factory=list)
    profile: list[KernelRow] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @property
    def dirname(self) -> str:
        """``iter-NNN``."""
        return f"iter-{self.iteration:03d}"


@dataclass
class RunView:
    """The run page: header facts, the iterations in order, the vLLM figures found for the target."""

    run_id: str
    target: str
    status: str
    stop_reason: str | None
    resume_command: str | None
    agent: str
    seed: Any
    branch: str | None
    started: str | None
    ended: str | None
    active_seconds: float
    cost_usd: float
    best: dict[str, Any]
    iterations: list[IterationView]
    scaled_down: bool
    vllm_source: str | None
    workload_names: list[str]
    in_flight: str | None = None
    noise_run: str | None = None  # decision.noise_run_note of iteration 0's gate
    resumed: list[str] = field(default_factory=list)  # UTC times the run was resumed at

    @property
    def candidates(self) -> list[IterationView]:
        """Iterations after the baseline."""
        return [it for it in self.iterations if it.iteration > 0]


def _verdict(r: dict[str, Any]) -> tuple[str, str]:
    if r["iteration"] == 0:
        return ("baseline", "ok") if r.get("accepted") else ("baseline failed", "bad")
    return ("accepted", "ok") if r.get("accepted") else ("rejected", "no")


def _stage_verdict(st: dict[str, Any]) -> str:
    v = st.get("verdict")
    if isinstance(v, str) and v:
        return v
    return "pass" if st.get("ok") else "fail"


def _workloads(gate: dict[str, Any], report_fig: dict[str, Any], on_cpu: bool, vllm: dict[str, float]) -> list[WorkloadFigure]:
    """Per-workload figures: from the gate JSON (ratio and noise live there), else from ``report.json``'s figures."""
    bench = gate.get("bench") or {}
    out = []
    source = bench.get("workloads") or {}
    if source:
        for name, w in source.items():
            cand, base = w.get("candidate") or {}, w.get("baseline") or {}
            rf = None if on_cpu else as_float(w.get("roofline_fraction"))
            c, b, hib = as_float(cand.get("median")), as_float(base.get("median")), bool(w.get("higher_is_better", True))
            ratio = as_float(w.get("ratio"))
            if ratio is None and c and b:  # an older gate JSON: the ratio of the medians
                ratio = c / b if hib else b / c
            out.append(WorkloadFigure(name, w.get("unit") or "", hib, c, b, ratio, as_float(w.get("noise")),
                                      as_float(cand.get("spread")), rf, vllm.get(name)))
    else:
        for name, w in (report_fig.get("workloads") or {}).items():
            c, b, hib = w.get("candidate"), w.get("baseline"), w.get("higher_is_better", True)
            ratio = None if not c or not b else (c / b if hib else b / c)
            out.append(WorkloadFigure(name, w.get("unit") or "", bool(hib), c, b, ratio, None, w.get("spread"), None,
                                      vllm.get(name)))
    order = {n: k for k, n in enumerate(WORKLOAD_ORDER)}
    return sorted(out, key=lambda w: order.get(w.name, 99))


def _layer_errors(parity: dict[str, Any]) -> list[tuple[str, list[float]]]:
    out = []
    for p in parity.get("prompts") or []:
        errs = p.get("layer_errors")
        if isinstance(errs, list) and errs:
            vals = [as_float(e if not isinstance(e, dict) else e.get("rel_err")) for e in errs]
            out.append((str(p.get("name") or p.get("prompt")), [v if v is not None else float("nan") for v in vals]))
    return out


def _sharp(parity: dict[str, Any] | None, recorded: list[dict[str, Any]] | None) -> list[SharpCheck]:
    """The sharp checks from the gate's parity section, else from ``report.json``'s figures; malformed entries skipped."""
    rows = sharp_parity(parity) if parity else (recorded or [])
    out = []
    for c in rows:
        fig, thr = as_float(c.get("figure")), as_float(c.get("threshold"))
        if fig is not None and thr:
            out.append(SharpCheck(str(c.get("check")), fig, thr))
    return out


def _profile(gate: dict[str, Any], on_cpu: bool) -> list[KernelRow]:
    """Rows of the gate's ``profile`` (``{"phases": {phase: {"ops": [{op, ms, calls, roofline_fraction}]}}}``
    or a flat ``{"ops": [...]}``), largest first per phase."""
    prof = gate.get("profile") or {}
    phases = prof.get("phases") or ({"decode": prof} if prof.get("ops") else {})
    rows = []
    for phase, body in phases.items():
        ops = sorted(body.get("ops") or [], key=lambda o: -(as_float(o.get("ms")) or 0.0))
        for o in ops:
            ms = as_float(o.get("ms"))
            if ms is None:
                continue
            calls = o.get("calls")
            rows.append(KernelRow(phase, str(o.get("op") or o.get("name")), ms, int(calls) if isinstance(calls, (int, float)) else None,
                                  None if on_cpu else as_float(o.get("roofline_fraction"))))
    return rows


def iteration_view(d: Path, r: dict[str, Any], vllm: dict[str, float]) -> IterationView:
    """The view of ``iter-NNN/`` from its ``report.json`` dict ``r`` and (when present) its ``gate.json``."""
    try:
        gate = json.loads((d / "gate.json").read_text())
    except (OSError, ValueError):
        gate = {}
    f = r.get("figures") or {}
    g = r.get("gate") or {}
    device = str(gate.get("device") or (gate.get("parity") or {}).get("device") or gate.get("gpu_profile") or "")
    on_cpu = device.startswith("cpu") or bool(f.get("scaled_down"))
    stages_src = gate.get("stages") or g.get("stages") or []
    stages = [StageView(str(st.get("name")), bool(st.get("ok")), _stage_verdict(st), as_float(st.get("seconds")), st.get("error"))
              for st in stages_src]
    verdict, css = _verdict(r)
    files = [n for n in ("candidate.diff", "gate.json", "gate.log", "transcript.json", "agent_error.txt", "report.md",
                         "system.md", "knowledge.md", "brief.md") if (d / n).is_file()]
    return IterationView(
        iteration=r["iteration"], verdict=verdict, css=css, summary=r.get("summary") or "", expected_gain=r.get("expected_gain") or "",
        reason=r.get("reason") or "", commit=r.get("commit"), accepted=bool(r.get("accepted")),
        max_rel_err=f.get("max_rel_err"), tolerance=f.get("tolerance"), max_decode_rel_err=f.get("max_decode_rel_err"),
        decode_tolerance=f.get("decode_tolerance"), speedup=f.get("speedup"), noise=f.get("noise"),
        cumulative=r.get("cumulative_speedup"), workloads=_workloads(gate, f, on_cpu, vllm if not on_cpu else {}),
        stages=stages, gate_seconds=g.get("seconds"), gate_error=g.get("error"), cost_usd=float(r.get("cost_usd") or 0.0),
        tokens=r.get("tokens") or {}, agent_seconds=float(r.get("agent_seconds") or 0.0), error=r.get("error"),
        changed_paths=list(r.get("changed_paths") or []), tunables=r.get("tunables"), scaled_down=bool(f.get("scaled_down")),
        on_cpu=on_cpu, env=gate.get("env") or {}, layer_errors=_layer_errors(gate.get("parity") or {}),
        sharp=_sharp(gate.get("parity"), f.get("sharp")), profile=_profile(gate, on_cpu), files=files)


def vllm_figures(repo_root: Path | None, target: str) -> tuple[dict[str, float], str | None]:
    """vLLM's medians for ``target`` (``<model>-<quant>-<gpu>``) from the newest ``docs/results/<gpu>-*/vllm.json``
    whose README title names the model and format; ``({}, None)`` for a tiny or CPU target or when none exists."""
    m = re.fullmatch(r"(.+)-(bf16|nvfp4)-([a-z0-9]+)", target)
    if repo_root is None or m is None or m.group(3) == "cpu" or "tiny" in m.group(1):
        return {}, None
    model, quant, gpu = m.groups()
    for f in sorted((Path(repo_root) / "docs" / "results").glob(f"{gpu}-*/vllm.json"), reverse=True):
        readme = f.parent / "README.md"
        title = readme.read_text().splitlines()[0].lower() if readme.is_file() else ""
        if model.lower() not in title or quant.lower() not in title:
            continue
        try:
            data = json.loads(f.read_text())
        except ValueError:
            continue
        figs = {k: as_float(w.get("median")) for k, w in (data.get("workloads") or {}).items()}
        return {k: v for k, v in figs.items() if v is not None}, str(f.relative_to(repo_root))
    return {}, None


def run_view(record: RunRecord) -> RunView:
    """Build the whole run's view from its folder (re-reading every ``report.json``)."""
    st = record.state
    root = Path(st["repo_root"]) if st.get("repo_root") and Path(st["repo_root"]).is_dir() else None
    vllm, source = vllm_figures(root, st["target"])
    iterations = [iteration_view(record.path / f"iter-{r['iteration']:03d}", r, vllm) for r in record.history()]
    names: list[str] = []
    for it in iterations:
        names += [w.name for w in it.workloads if w.name not in names]
    resume = None
    if st.get("status") in ("interrupted", "crashed", "running", "failed", "stopped"):  # all but finished resume
        resume = st.get("resume_command") or f"metainfer build --resume {record.run_id}"
    in_flight = None
    flight = st.get("in_flight") or {}
    if flight.get("iteration") is not None:
        i = flight["iteration"]
        try:
            partial = json.loads((record.path / f"iter-{i:03d}" / "gate.json").read_text())
        except (OSError, ValueError):
            partial = {}
        done = ", ".join(f"{x.get('name')} {'ok' if x.get('ok') else 'red'} {as_float(x.get('seconds')) or 0:.0f} s"
                         for x in partial.get("stages") or [])
        in_flight = (f"iteration {i} was in flight when the run stopped (gate stages finished: {done or 'none'}"
                     + (f"; {partial['running']} was running" if partial.get("running") else "") + "); resuming redoes it")
    return RunView(
        run_id=record.run_id, target=st["target"], status=st.get("status") or "?", stop_reason=st.get("stop_reason"),
        resume_command=resume, agent=str(st.get("agent")), seed=st.get("seed"), branch=st.get("branch"),
        started=st.get("started"), ended=st.get("ended"), active_seconds=float(st.get("active_seconds") or 0.0),
        cost_usd=float(st.get("cost_usd") or 0.0), best=st.get("best") or {}, iterations=iterations,
        scaled_down=any(it.scaled_down for it in iterations), vllm_source=source if any(not it.on_cpu for it in iterations) else None,
        workload_names=names, in_flight=in_flight, noise_run=noise_run_note(_gate_json(record.path / "iter-000")),
        resumed=[str(t) for t in st.get("resumed") or []])


def _gate_json(d: Path) -> dict[str, Any] | None:
    """``d/gate.json`` parsed, None when absent or unreadable."""
    try:
        return json.loads((d / "gate.json").read_text())
    except (OSError, ValueError):
        return None

"""Run the mutation suite: each mutant applied to a fresh copy of an engine, judged by parity, scored.

The unmutated engine is judged first and must pass (otherwise the suite proves nothing). Every
mutant runs in its own copy of the engine folder, and parity (``harness.parity.run_parity``) must
reject it; the score is killed / applicable. One reference serves every run when
``harness.parity`` offers it (``ReferenceCache``), so the HF model's outputs are computed once.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.prompts import SeedDrawn
from metainfer.mutants.catalogue import Mutant, MutantDriftError


@dataclass
class MutantOutcome:
    """One row of the table.

    Attributes:
        name, breaks, path: from the mutant (``path``: ``shared`` / ``reference+triton``; ``-`` for the
            unmutated engine).
        verdict: ``killed`` (parity rejected it), ``survived`` (parity passed it), ``drift`` (its
            source patch no longer applies to the template), ``n/a`` (other weight format), ``error`` (the
            run ran out of device memory: the machine's verdict, not parity's, so it counts as not killed),
            ``not run`` (the unmutated engine failed, so no mutant is judged), or for the unmutated engine
            ``pass`` / ``FAIL``.
        figure: the first check that failed (or the worst figures when none did).
        seconds: wall time of its parity run.
    """

    name: str
    breaks: str
    path: str
    verdict: str
    figure: str
    seconds: float


@dataclass
class SuiteResult:
    """The baseline row, the mutant rows and the score."""

    baseline: MutantOutcome
    outcomes: list[MutantOutcome] = field(default_factory=list)

    @property
    def applicable(self) -> list[MutantOutcome]:
        return [o for o in self.outcomes if o.verdict not in ("n/a", "not run")]

    @property
    def killed(self) -> int:
        return sum(o.verdict == "killed" for o in self.outcomes)

    @property
    def score(self) -> float:
        """killed / applicable mutants (drifted and error ones count as not killed); 0 when none applies."""
        n = len(self.applicable)
        return self.killed / n if n else 0.0

    @property
    def ok(self) -> bool:
        """The unmutated engine passed and every applicable mutant was killed."""
        return self.baseline.verdict == "pass" and bool(self.applicable) and self.killed == len(self.applicable)

    def to_json(self) -> dict:
        return {"ok": self.ok, "score": self.score, "killed": self.killed, "applicable": len(self.applicable),
                "baseline": asdict(self.baseline), "mutants": [asdict(o) for o in self.outcomes]}


def apply_mutant(mutant: Mutant, engine_dir: Path, dest: Path) -> Path:
    """Copy the target folder ``engine_dir`` to ``dest`` and apply ``mutant``'s edits there.

    Raises:
        MutantDriftError: an edit's file is missing, or its old string occurs a different number of
            times than the mutant expects (the template changed: update the catalogue).
    """
    shutil.copytree(engine_dir, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for e in mutant.edits:
        path = dest / e.path
        if not path.is_file():
            raise MutantDriftError(f"mutant {mutant.name}: {e.path} does not exist in the engine; update metainfer/mutants/catalogue.py")
        text = path.read_text()
        found = text.count(e.old)
        if found != e.count:
            raise MutantDriftError(
                f"mutant {mutant.name}: expected {e.count} occurrence(s) of {e.old!r} in {e.path}, found {found}; "
                "the template changed: update metainfer/mutants/catalogue.py"
            )
        path.write_text(text.replace(e.old, e.new))
    return dest


#: how an engine's out-of-device-memory error reads in the first line of a parity error (``EngineError:
#: OutOfMemoryError: CUDA out of memory ...``; a CUDA runtime error; cuBLAS failing to allocate its workspace), lower case
_OOM = ("outofmemoryerror", "out of memory", "cublas_status_alloc_failed")


def _verdict(result) -> str:
    """``survived`` when parity passed, ``error`` when the engine ran out of device memory (a full GPU proves
    nothing about the mutated op), else ``killed``."""
    if result.ok:
        return "survived"
    first = result.error.strip().splitlines()[0].lower() if result.error and result.error.strip() else ""
    return "error" if any(s in first for s in _OOM) else "killed"


def _figure(result) -> str:
    """The first failed check of the worst failing entry, the error, or the worst figures."""
    if result.error:
        return "engine raised: " + result.error.strip().splitlines()[0][:120]
    failing = [f for f in result.prompts if f.failures]
    run_level = getattr(result, "update_failures", None)
    if run_level and not any("rel err" in x for f in failing for x in f.failures if "hidden" not in x):
        own = _hf_own(result) if "consistency" in run_level[0] else ""
        return f"run-level: {run_level[0]}"[:140] + own  # the per-prompt logits stayed inside: say what did not
    if failing:
        worst = next((f for f in failing if f.name == result.worst_prompt), failing[0])
        return f"{worst.name}: {worst.failures[0]}"[:140]
    return f"max prefill {result.max_rel_err:.3g}, decode {result.max_decode_rel_err:.3g} (within tolerance){_margins(result)}"


def _margins(result) -> str:
    """The run-level figures as fractions of their thresholds (worst layer-local update, final norm + lm_head,
    worst consistency): how close a passing engine came; '' when the result has none."""
    local, limits = getattr(result, "local_update_errors", None), getattr(result, "local_update_tolerances", None)
    if not local or not limits:
        return ""
    tol = result.tolerances or {}
    worst = max(range(len(local)), key=lambda l: local[l] / limits[l])
    out = f"; local layers.{worst} {local[worst]:.3g} ({local[worst] / limits[worst]:.2f} of its threshold)"
    if tol.get("local_logits"):
        out += f", lm_head {result.local_logits_err:.3g} ({result.local_logits_err / tol['local_logits']:.2f})"
    mixer, m_tol = getattr(result, "mixer_local_errors", None), getattr(result, "mixer_local_tolerance", None)
    if mixer and m_tol:
        l = max(range(len(mixer)), key=lambda i: mixer[i])
        out += f", mixer layers.{l} {mixer[l]:.3g} ({mixer[l] / m_tol:.2f}{' advisory' if result.mixer_local_advisory else ''})"
    if result.consistency and tol.get("consistency"):
        name, x = max(result.consistency.items(), key=lambda kv: kv[1])
        out += f", consistency {name} {x:.3g} ({x / result.consistency_tolerances.get(name, tol['consistency']):.2f})"
        out += _hf_own(result)
    return out


def _hf_own(result) -> str:
    """``" (HF's own: decode 0.0061, prefill 0.0004)"``: HF's cached path against its uncached forward on the same
    prompts (``harness.reference_cached``), the anchor of a GPU's consistency thresholds; '' when not measured."""
    own = getattr(result, "reference_consistency", None) or {}
    return " (HF's own: " + ", ".join(f"{k} {v:.2g}" for k, v in sorted(own.items(), reverse=True)) + ")" if own else ""


class ParityJudge:
    """Runs ``harness.parity.run_parity`` for several engines on one checkpoint with the same prompts,
    sharing one reference when ``run_parity`` accepts ``reference=`` (``harness.reference_cache``)."""

    def __init__(self, checkpoint: Path, *, device: str, seed: int, lengths: tuple[int, ...], steps: int,
                 reference_dtype: str | None = None) -> None:
        from harness import parity
        from harness.worker import WorkerLimits

        self.run_parity = parity.run_parity
        # the gate's limits for the same scale: a full-size bf16 reference takes minutes to load on the GPU
        limits = WorkerLimits.for_scale("cpu" if str(device) == "cpu" else "full")
        self.kwargs = dict(seed=seed, device=device, lengths=lengths, steps=steps, limits=limits, reference_dtype=reference_dtype)
        self.checkpoint = checkpoint
        self.cache = None
        if "reference" in inspect.signature(parity.run_parity).parameters:
            from harness.reference_cache import ReferenceCache

            # a fixed nonce: every run of the suite with one --seed judges the same prompts (reproducible tables)
            self.cache = ReferenceCache(checkpoint, device=device, dtype=reference_dtype, nonce=seed, limits=limits)
            self.kwargs["reference"] = self.cache

    def __call__(self, engine_dir: Path, lengths: tuple[int, ...] | None = None, steps: int | None = None):
        """Parity of ``engine_dir``; ``lengths`` / ``steps`` override the judge's for this run."""
        kw = dict(self.kwargs)
        if lengths is not None:
            kw["lengths"] = lengths
        if steps is not None:
            kw["steps"] = steps
        return self.run_parity(engine_dir, self.checkpoint, **kw)

    def close(self) -> None:
        for name in ("close", "stop"):
            if self.cache is not None and hasattr(self.cache, name):
                getattr(self.cache, name)()
                return


def run_suite(
    engine_dir: Path, checkpoint: Path, mutants: tuple[Mutant, ...], *, quant: str, device: str = "cpu",
    seed: int = 1, lengths: tuple[int, ...], steps: int, progress=None,
    mutant_lengths: tuple[int, ...] | None = None, mutant_steps: int | None = None, twin_periods: int = 0,
) -> SuiteResult:
    """Judge the unmutated engine, then every mutant, each from its own copy of ``engine_dir``.

    Args:
        engine_dir: a target folder holding ``engine/`` (a fresh render, normally).
        mutants: the mutants to run; those of another weight format than ``quant``, or needing longer
            prompts or decode runs than ``lengths`` / ``steps`` guarantee (``min_tokens``, ``min_steps``), are ``n/a``.
        progress: called with each finished ``MutantOutcome`` (e.g. to print a line), or None.
        mutant_lengths, mutant_steps: a shorter set for the mutants (the unmutated engine always runs
            ``lengths`` / ``steps``): a killed mutant stays killed under more prompts, so a short set
            only risks calling a mutant survived that the full set would kill (full-size runs on a
            time budget).
        twin_periods: > 0: then judge the unmutated engine and every survivor on the shallow twin of that many
            layer periods against float32, as the gate's twin stage does (``metainfer.mutants.twin_pass``).
    Raises:
        harness.parity.EngineDirError, CheckpointError: the engine or checkpoint is unusable.
    """
    judge = ParityJudge(Path(checkpoint), device=device, seed=seed, lengths=lengths, steps=steps)
    m_lengths, m_steps = mutant_lengths or lengths, mutant_steps or steps
    # the longest prompt every seed guarantees: a seed-drawn length counts by its lower bound
    longest = max(n.lo if isinstance(n, SeedDrawn) else int(n) for n in m_lengths)
    note = progress or (lambda _o: None)
    try:
        with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
            t0 = time.perf_counter()
            base = judge(Path(engine_dir))
            baseline = MutantOutcome("(unmutated)", "nothing", "-", "pass" if base.ok else "FAIL", _figure(base) + (
                                     _margins(base) if not base.ok else ""),
                                     time.perf_counter() - t0)
            note(baseline)
            suite = SuiteResult(baseline)
            for m in mutants:
                t0 = time.perf_counter()
                if not base.ok:  # a mutant rejected beside a failing control says nothing about parity
                    out = MutantOutcome(m.name, m.breaks, m.path, "not run", "the unmutated engine failed parity", 0.0)
                elif m.quant and m.quant != quant:
                    out = MutantOutcome(m.name, m.breaks, m.path, "n/a", f"{m.quant} targets only", 0.0)
                elif longest < m.min_tokens or m_steps < m.min_steps:
                    out = MutantOutcome(m.name, m.breaks, m.path, "n/a", f"needs prompts of >= {m.min_tokens} tokens and "
                                        f">= {m.min_steps} decode steps (this run: {longest}, {m_steps})", 0.0)
                else:
                    try:
                        copy = apply_mutant(m, Path(engine_dir), Path(tmp) / m.name / Path(engine_dir).name)
                    except MutantDriftError as err:
                        out = MutantOutcome(m.name, m.breaks, m.path, "drift", str(err)[:140], 0.0)
                    else:
                        res = judge(copy, m_lengths, m_steps)
                        out = MutantOutcome(m.name, m.breaks, m.path, _verdict(res), _figure(res),
                                            time.perf_counter() - t0)
                        shutil.rmtree(copy.parent, ignore_errors=True)
                suite.outcomes.append(out)
                note(out)
    finally:
        judge.close()
    if twin_periods > 0:
        from metainfer.mutants.twin_pass import twin_pass

        twin_pass(suite, Path(engine_dir), Path(checkpoint), mutants, periods=twin_periods, device=device, seed=seed,
                  lengths=lengths, steps=steps, mutant_lengths=m_lengths, progress=progress)
    return suite


def format_table(suite: SuiteResult) -> str:
    """The table (mutant, path, what it breaks, verdict, figure that broke, seconds) and the score line."""
    rows = [suite.baseline, *suite.outcomes]
    head = f"{'mutant':26s} {'path':17s} {'verdict':9s} {'s':>6s}  figure / what it breaks"
    lines = [head, "-" * len(head)]
    for o in rows:
        lines.append(f"{o.name:26s} {o.path:17s} {o.verdict:9s} {o.seconds:6.1f}  {o.figure}")
        lines.append(f"{'':26s} {'':17s} {'':9s} {'':6s}    breaks: {o.breaks}")
    lines.append(f"mutation score {suite.killed}/{len(suite.applicable)} = {100 * suite.score:.0f} % "
                 f"(unmutated engine: {suite.baseline.verdict})")
    return "\n".join(lines)

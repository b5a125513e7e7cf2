"""The gate's typed result: ``GateResult`` with its ``StageResult`` list, and their JSON form (gate JSON schema 2).

Schema 2 keeps every key of schema 1 (docs/CONTRACTS.md, "The gate") and adds ``stages[].verdict``,
``isolation``, ``timings``, ``nonces``, ``integrity``. ``GateResult.to_json()`` is what the gate
writes; ``GateResult.from_json()`` reads schema 1 and 2 back (a schema-1 stage gets verdict
``pass``/``fail`` from its ``ok``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = 2
#: Stage verdicts: green, red on the figures, ran past a limit, its worker died, judge or checkpoint changed.
VERDICTS = ("pass", "fail", "timeout", "crashed", "tampered")


@dataclass
class StageResult:
    """One stage of a gate run.

    Attributes:
        name: ``static``, ``parity`` or ``bench``.
        ok: the stage is green.
        verdict: one of ``VERDICTS`` (``pass`` iff ok).
        seconds: wall time of the stage, judge's clock.
        error: why it is red (one paragraph; a worker's last output lines included), else None.
        detail: stage-specific figures (static findings, parity headline, bench objective).
    """

    name: str
    ok: bool
    verdict: str
    seconds: float
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"stage verdict {self.verdict!r}: use one of {', '.join(VERDICTS)}")
        if self.ok != (self.verdict == "pass"):
            raise ValueError(f"stage {self.name}: ok={self.ok} contradicts verdict {self.verdict!r}")

    def to_json(self) -> dict[str, Any]:
        """``{"name", "ok", "verdict", "seconds", "error", "detail"}``."""
        return {"name": self.name, "ok": self.ok, "verdict": self.verdict, "seconds": round(self.seconds, 3),
                "error": self.error, "detail": self.detail}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StageResult:
        """Read a stage entry (schema 1 entries have no verdict: ``pass``/``fail`` from ``ok``)."""
        ok = bool(d.get("ok"))
        verdict = d.get("verdict")
        if verdict not in VERDICTS or (verdict == "pass") != ok:  # schema 1, or a hand-written record
            verdict = "pass" if ok else "fail"
        return cls(str(d.get("name")), ok, verdict, float(d.get("seconds") or 0.0), d.get("error"), dict(d.get("detail") or {}))


#: Keys of the gate JSON that are GateResult fields (the rest of a record lives in ``GateResult.meta``).
_FIELDS = ("ok", "complete", "stages", "parity", "bench", "seed", "env", "isolation", "timings", "nonces", "running")


@dataclass
class GateResult:
    """One gate run.

    Attributes:
        ok: every selected stage ran and is green.
        complete: the gate finished (False in a record written while it runs, or left by a killed gate).
        stages: the stages run so far, in order; the first red one is the last.
        parity: the parity block (``ParityResult.to_json()``), None when parity did not run.
        bench: the bench block (``BenchResult.data``), None when the bench did not run.
        seed: the gate seed; nonces: the secret nonces mixed into it per stage (``parity``, ``bench``,
            and ``gate``, the one ``--prompt-nonce`` takes), each written once its stage is over.
        env: the environment line (GPU, driver, torch, triton, commit).
        isolation: how workers were walled off (``namespace`` or ``process``, ``harness.worker_isolation``).
        timings: seconds of the gate's own machinery: ``integrity_s`` (fingerprints before and after the stages),
            ``worker_start_s`` (per stage, each worker's start-up from spawn to imports done: the isolation's cost).
        running: the stage in progress while the gate runs, else None.
        meta: every other key of the record (engine, baseline, checkpoint, started, harness_digest, ...).
    """

    ok: bool = False
    complete: bool = False
    stages: list[StageResult] = field(default_factory=list)
    parity: dict[str, Any] | None = None
    bench: dict[str, Any] | None = None
    seed: int | None = None
    env: dict[str, Any] = field(default_factory=dict)
    isolation: str | None = None
    timings: dict[str, Any] = field(default_factory=dict)
    nonces: dict[str, int] = field(default_factory=dict)
    running: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def failed_stage(self) -> StageResult | None:
        """The red stage, if any."""
        return next((s for s in self.stages if not s.ok), None)

    @property
    def verdict(self) -> str:
        """``pass`` for a green gate, else the red stage's verdict (``fail`` when none ran to a verdict)."""
        red = self.failed_stage
        return red.verdict if red else ("pass" if self.ok else "fail")

    def to_json(self) -> dict[str, Any]:
        """The gate JSON (schema 2): schema 1's keys and the additions; values as they are (floats may be non-finite)."""
        out = {"schema": SCHEMA, **self.meta}
        out |= {"seed": self.seed, "env": self.env, "stages": [s.to_json() for s in self.stages], "ok": self.ok,
                "complete": self.complete, "running": self.running, "parity": self.parity, "bench": self.bench,
                "isolation": self.isolation, "timings": self.timings, "nonces": self.nonces, "verdict": self.verdict}
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GateResult:
        """Read a gate JSON of schema 1 or 2 (or the stand-in a gate runner writes when the gate left none)."""
        meta = {k: v for k, v in d.items() if k not in _FIELDS and k not in ("schema", "verdict")}
        return cls(ok=bool(d.get("ok")), complete=bool(d.get("complete")),
                   stages=[StageResult.from_json(s) for s in d.get("stages") or []], parity=d.get("parity"),
                   bench=d.get("bench"), seed=d.get("seed"), env=dict(d.get("env") or {}), isolation=d.get("isolation"),
                   timings=dict(d.get("timings") or {}), nonces=dict(d.get("nonces") or {}), running=d.get("running"),
                   meta=meta)

    def __getitem__(self, key: str) -> Any:
        """``result["ok"]``: the JSON form's value (for readers written against the schema-1 dict)."""
        return self.to_json()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """``dict.get`` on the JSON form."""
        return self.to_json().get(key, default)

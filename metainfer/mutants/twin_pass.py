"""The mutation suite's second pass, as the gate's ``twin`` stage judges: the unmutated engine and every mutant that
survived parity, carried onto the shallow twin and judged against a float32 reference (docs/PARITY.md, "A float32
twin pass").

It runs after the whole first pass, whose reference is closed by then: at full size the bf16 reference (about 70 GB)
and the twin's float32 one (about 18 GB) never hold the GPU together.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from metainfer.mutants.catalogue import Mutant, by_name
from metainfer.mutants.runner import MutantOutcome, ParityJudge, SuiteResult, _figure, apply_mutant


def twin_pass(suite: SuiteResult, engine_dir: Path, checkpoint: Path, mutants: tuple[Mutant, ...], *, periods: int,
              device: str, seed: int, lengths: tuple[int, ...], steps: int, mutant_lengths: tuple[int, ...],
              progress=None) -> SuiteResult:
    """Judge ``suite``'s unmutated engine and its survivors on the twin; update their rows in place and return it.

    A survivor the twin rejects becomes ``killed`` with a figure starting ``twin:``; an unmutated engine the twin
    rejects becomes ``FAIL``. A mutant whose edits do not carry onto the twin is killed (the gate rejects it too).
    """
    from harness.twin import truncate_checkpoint, twin_prompt_lengths
    from metainfer.twin import TwinCarryError, twin_engine

    note = progress or (lambda _o: None)
    by = {m.name: m for m in mutants}
    with tempfile.TemporaryDirectory(prefix="mutants-twin-") as tmp:
        ck = truncate_checkpoint(Path(checkpoint), periods, Path(tmp) / "checkpoint")
        judge = ParityJudge(ck, device=device, seed=seed, lengths=twin_prompt_lengths(lengths, device), steps=steps,
                            reference_dtype="float32")
        try:
            rows = [suite.baseline] + [o for o in suite.outcomes if o.verdict == "survived"]
            for row in rows:
                t0 = time.perf_counter()
                work = Path(tmp) / row.name.strip("()")
                src = Path(engine_dir)
                if row is not suite.baseline:
                    src = apply_mutant(by.get(row.name) or by_name(row.name), src, work / "full" / src.name)
                try:
                    twin = twin_engine(src, periods, work)
                except TwinCarryError as err:
                    res, figure = None, f"twin: {err}"[:160]
                else:
                    res = judge(twin, None if row is suite.baseline else twin_prompt_lengths(mutant_lengths, device))
                    figure = f"twin: {_figure(res)}"
                rejected = res is None or not res.ok
                if row is suite.baseline:
                    row.verdict = "FAIL" if rejected else row.verdict
                elif rejected:
                    row.verdict = "killed"
                row.figure = figure if rejected else f"{row.figure}; {figure}"
                row.seconds += time.perf_counter() - t0
                shutil.rmtree(work, ignore_errors=True)
                note(row)
        finally:
            judge.close()
    return suite

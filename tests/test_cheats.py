"""The cheat table in CI: every attempt of tests/cheats/ is stopped where it declares, every edit of
tests/honest/ is accepted or judged not faster, nothing hangs (``metainfer cheats`` prints the same table).

One run of the whole table (2 gates at a time, each gate a real ``python -m harness.gate`` subprocess on
private copies of the judge, the checkpoint, the candidate and the baseline); each attempt is then its
own test case, so a failure names the attempt and what the gate said.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cheats import render_tiny
from metainfer.attempts.runner import Setup, run_all
from metainfer.attempts.spec import CLASSES, STAGES, discover
from metainfer.commands.cheats import print_table

ROOT = Path(__file__).resolve().parents[1]
ATTEMPTS = discover(ROOT)


def test_the_table_covers_every_class_of_issue_10():
    cheats = [a for a in ATTEMPTS if not a.honest]
    assert len(cheats) >= 30 and len(ATTEMPTS) - len(cheats) >= 6
    assert {a.klass for a in cheats} == set(CLASSES) - {"honest"}
    for a in cheats:
        assert a.stage in STAGES and a.description and callable(a.apply), a.name


@pytest.fixture(scope="module")
def table(tmp_path_factory, tiny_checkpoint):
    work = tmp_path_factory.mktemp("cheat-table")
    setup = Setup(engine=render_tiny(work / "render"), checkpoint=tiny_checkpoint("bf16"), judge=ROOT, rounds=3, timeout_s=600)
    t0 = time.monotonic()
    outcomes = run_all(ATTEMPTS, setup, work / "attempts", jobs=2)
    print_table(outcomes, time.monotonic() - t0)
    return {o.attempt.name: o for o in outcomes}


@pytest.mark.slow
@pytest.mark.parametrize("name", [a.name for a in ATTEMPTS])
def test_attempt_ends_as_declared(table, name):
    o = table[name]
    bad = ("hang", "broken") if o.attempt.honest else ("accepted", "hang", "broken")  # an honest edit may be faster
    assert o.verdict not in bad, f"{name}: {o.verdict}: {o.why}; gate said: {o.error}"
    if o.attempt.open and not o.passed:  # a known hole with an owner (the cheat's OPEN): reported, not hidden
        pytest.xfail(f"open: {o.attempt.open}; {o.why}")
    assert o.passed, f"{name} ({o.attempt.expected}): {o.why}; gate said: {o.error}"


def _attempt(name: str):
    return next(a for a in ATTEMPTS if a.name == name)


@pytest.mark.parametrize("name, verdict, stage, error, passed", [
    ("nan_logits", "fail", "parity", "len0001: NaN in the logits", True),
    ("nan_logits", "fail", "bench", "nan", False),           # stopped, but by the wrong stage
    ("nan_logits", "accepted", None, None, False),
    ("hang_busy_load", "timeout", "parity", "load ran past 75 s", True),
    ("hang_busy_load", "fail", "parity", "x", False),         # declared verdict timeout
    ("hang_busy_load", "hang", None, None, False),            # the runner had to kill the gate
    ("lazy_outputs", "not-faster", None, None, True),         # isolation left an honest engine
    ("lazy_outputs", "broken", None, "exit 1 without a record", False),
    ("tunable_chunk_size", "not-faster", None, None, True),
    ("tunable_chunk_size", "accepted", None, None, True),
    ("tunable_chunk_size", "fail", "static", "calls .write()", False),
])
def test_outcomes_are_judged_against_the_declaration(name, verdict, stage, error, passed):
    from metainfer.attempts.runner import judge_outcome

    ok, why = judge_outcome(_attempt(name), verdict, stage, error)
    assert ok is passed and (ok or why)

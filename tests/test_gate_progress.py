"""The build relays the gate's in-stage progress lines (gate.log, ``PROGRESS_MARK``) as they are written."""

from __future__ import annotations

from metainfer.build.gate_runner import PROGRESS_MARK, _report_progress, judge_env


def test_progress_lines_are_relayed_once_and_only_when_complete(tmp_path):
    log = tmp_path / "gate.log"
    head = "$ python -m harness.gate ...\n"
    log.write_text(head + "engine noise\n" + f"2026-12-02 07:35:48,491{PROGRESS_MARK}reference: 11 prompts in 9.1 s\n"
                   + f"07:35:49{PROGRESS_MARK}engine lo")  # the last line is still being written
    got: list[str] = []
    offset = _report_progress(log, len(head), got.append)
    assert got == ["reference: 11 prompts in 9.1 s"]
    with open(log, "a") as f:
        f.write("ad: 0.3 s\nnot progress\n")
    offset = _report_progress(log, offset, got.append)
    assert got == ["reference: 11 prompts in 9.1 s", "engine load: 0.3 s"] and offset == log.stat().st_size
    assert _report_progress(log, offset, got.append) == offset and len(got) == 2  # nothing new: nothing relayed
    assert _report_progress(tmp_path / "missing.log", 7, got.append) == 7  # no log yet: wait
    assert _report_progress(log, 0, None) == 0


def test_the_judge_logs_its_progress_unless_told_otherwise():
    assert judge_env("/tmp/p", {"PATH": "/bin"})["METAINFER_LOG"] == "INFO"
    assert judge_env("/tmp/p", {"PATH": "/bin", "METAINFER_LOG": "WARNING"})["METAINFER_LOG"] == "WARNING"

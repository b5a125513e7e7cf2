"""Decision, trailers and run-record rendering of the build loop, on gate JSONs of the contract's schema."""

from __future__ import annotations

import json

from metainfer.build.decision import aa_margin, commit_message, decide, decide_baseline, parse_trailers, trailers
from metainfer.build.gate_runner import GateOutcome
from metainfer.build.records import RunRecord, write_json
from metainfer.build.report import summary_markdown, write_summary


def _gate(parity_ok=True, speedup=1.3, noise=0.05, beats=True, bench=True) -> dict:
    stages = [{"name": "static", "ok": True, "seconds": 0.2, "error": None},
              {"name": "parity", "ok": parity_ok, "seconds": 3.0, "error": None if parity_ok else "prompt 'len63' logits"}]
    g = {"schema": 1, "ok": parity_ok, "stages": stages,
         "parity": {"ok": parity_ok, "max_rel_err": 0.004 if parity_ok else 0.41, "tolerance": 0.03}}
    if parity_ok and bench:
        stages.append({"name": "bench", "ok": True, "seconds": 9.0, "error": None})
        w = lambda c, b: {"unit": "tok/s", "higher_is_better": True, "candidate": {"median": c, "spread": 0.4, "samples": [c]},
                          "baseline": {"median": b, "spread": 0.3, "samples": [b]}, "roofline_fraction": 0.0123}
        g["bench"] = {"scaled_down": True, "workloads": {"decode-bs1": w(41.5, 32.0), "conc32": w(120.0, 100.0),
                                                         "ttft": {**w(15.0, 20.0), "unit": "ms", "higher_is_better": False}},
                      "objective": {"speedup": speedup, "noise": noise, "beats_baseline": beats}}
    return g


def test_decisions_name_the_reason():
    assert decide(GateOutcome(_gate(), 0, False, 12.0)).accepted
    assert decide(GateOutcome(_gate(), 0, False, 12.0)).reason.startswith("faster: speedup 1.300")
    r = decide(GateOutcome(_gate(parity_ok=False), 1, False, 3.0))
    assert not r.accepted and "parity failed: max rel err 0.41 > tolerance 0.03" in r.reason
    decode_only = _gate(parity_ok=False)
    decode_only["parity"] |= {"max_rel_err": 0.01, "max_decode_rel_err": 0.2, "decode_tolerance": 0.05}
    r = decide(GateOutcome(decode_only, 1, False, 3.0))
    assert "max decode rel err 0.2 > tolerance 0.05" in r.reason and "max rel err 0.01 >" not in r.reason, r.reason
    greedy_only = _gate(parity_ok=False)
    greedy_only["parity"] |= {"max_rel_err": 0.01, "max_decode_rel_err": 0.02, "decode_tolerance": 0.05}
    r = decide(GateOutcome(greedy_only, 1, False, 3.0))
    assert r.reason.startswith("parity failed: prompt 'len63' logits (the per-prompt nets held: prefill rel err 0.01 of 0.03, "
                               "decode 0.02 of 0.05)"), r.reason
    assert decide(GateOutcome(_gate(speedup=1.02, beats=False), 0, False, 1.0)).reason.startswith("within noise")
    assert decide(GateOutcome(_gate(speedup=0.7, beats=False), 0, False, 1.0)).reason.startswith("slower")
    one_lost = _gate(speedup=1.036, noise=0.016, beats=False)  # beyond its noise bar, but a round lost
    one_lost["bench"]["workloads"]["ttft"]["ratios"] = [1.05, 0.98, 1.04]
    r = decide(GateOutcome(one_lost, 0, False, 1.0))
    assert not r.accepted and r.reason.startswith("not faster in every round") and "ttft lost round 2 of 3 (ratio 0.980)" in r.reason, r.reason
    timed = GateOutcome({"ok": False, "stages": []}, None, True, 9.0, "gate timed out after 5s and was killed")
    assert not decide(timed).accepted and "timed out" in decide(timed).reason
    crashed = GateOutcome(_gate(), 0, False, 1.0, "gate exited with status -11; see gate.log")
    assert not decide(crashed).accepted  # a readable JSON does not rescue a crashed gate
    assert decide_baseline(GateOutcome(_gate(speedup=1.0, beats=False), 0, False, 1.0)).accepted
    assert not decide_baseline(GateOutcome(_gate(parity_ok=False), 1, False, 1.0)).accepted


def test_a_candidate_must_clear_the_noise_runs_offset():
    # the engine raced against itself in its own processes came out 1.107 ± 0.008 (seen on the H200): a
    # candidate "faster" by less than that offset is not faster, whatever its own gate's noise bar says
    margin = aa_margin(_gate(speedup=1.107, noise=0.008, beats=True))
    assert abs(margin - 0.099) < 1e-9
    r = decide(GateOutcome(_gate(speedup=1.09, noise=0.01, beats=True), 0, False, 1.0), margin)
    assert not r.accepted and "noise run" in r.reason
    assert decide(GateOutcome(_gate(speedup=1.30, noise=0.05, beats=True), 0, False, 1.0), margin).accepted
    assert aa_margin(_gate(bench=False)) is None and aa_margin(None) is None
    assert decide(GateOutcome(_gate(speedup=1.10, noise=0.01, beats=True), 0, False, 1.0), None).accepted
    # a noise run on shared cores measures no steady offset: it must not block every later candidate
    assert aa_margin(_gate(speedup=0.638, noise=10.413, beats=False)) == 0.0
    assert decide(GateOutcome(_gate(speedup=1.30, noise=0.05, beats=True), 0, False, 1.0),
                  aa_margin(_gate(speedup=0.638, noise=10.413, beats=False))).accepted


def test_upgrade_steps_are_gated_by_the_builds_judge_with_its_quick_parity_flags():
    # one code path: an upgrade step faces the same decision as a build iteration, noise-run margin included
    from pathlib import Path

    from metainfer.build import iteration
    from metainfer.build.gate_runner import GateRequest
    from metainfer.upgrade import gate as upgrade_gate

    assert upgrade_gate.judge is iteration.judge
    assert not upgrade_gate.rejected("conflict: x").decision.accepted
    base = dict(engine=Path("e"), baseline=Path("b"), checkpoint=Path("c"), gpu="cpu", seed=3)
    argv = GateRequest(**base, parity_lengths=(3, 9), parity_steps=1).argv(Path("g.json"))
    assert argv[argv.index("--parity-lengths") + 1] == "3,9" and argv[argv.index("--parity-steps") + 1] == "1"
    plain = GateRequest(**base).argv(Path("g.json"))
    assert "--parity-lengths" not in plain and "--parity-steps" not in plain


def test_trailers_carry_the_figures_and_parse_back():
    t = trailers(_gate(), 7042, "run-x", 3)
    msg = commit_message("BLOCK_N 64→128 in the W4A16 matmul\n(fewer programs)", t)
    assert msg.splitlines()[0] == "BLOCK_N 64→128 in the W4A16 matmul (fewer programs)"
    back = parse_trailers(msg)
    assert back == t
    assert back["Parity-Max-Rel-Err"] == "0.004" and back["Decode-BS1-Tok-S"] == "41.5" and back["TTFT-ms"] == "15"
    assert back["Conc32-Tok-S"] == "120" and back["Roofline-Fraction"] == "0.0123" and back["Speedup"] == "1.3000"
    assert back["Noise"] == "0.0500" and back["Gate-Seed"] == "7042" and back["Run-Id"] == "run-x" and back["Iteration"] == "3"
    cpu = _gate()  # the same gate run on the CPU: its fraction of a GPU roofline is not a figure to commit
    cpu["device"] = "cpu"  # as the gate JSON has it
    assert "Roofline-Fraction" not in trailers(cpu, 7042, "run-x", 3) and "Speedup" in trailers(cpu, 7042, "run-x", 3)


def test_summary_table_and_html_plot(tmp_path):
    rec = RunRecord.create(tmp_path, "tgt", {"agent": "scripted", "seed": 0, "branch": "metainfer/tgt", "iterations": 2})
    rows = [(0, True, "baseline", _gate(speedup=1.0, beats=False), 1.0), (1, True, "faster", _gate(), 1.3),
            (2, False, "broken", _gate(parity_ok=False), 1.3)]
    for i, acc, summary, g, cum in rows:
        d = rec.iter_dir(i)
        from metainfer.build.decision import figures
        write_json(d / "report.json", {"iteration": i, "accepted": acc, "summary": summary, "reason": f"why {i}",
                                       "commit": "abcdef123456" if acc else None, "figures": figures(g),
                                       "cumulative_speedup": cum})
    rec.state.update({"status": "finished", "stop_reason": "ran 2 iterations",
                      "best": {"iteration": 1, "commit": "abcdef123456", "cumulative_speedup": 1.3}})
    md = summary_markdown(rec)
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    assert len(lines) == 1 + 3  # header + one row per iteration
    assert ("| 1 | **accepted** abcdef12 | faster | 0.004 | 1.300× ± 5.0 % | 1.300 | 15 vs 20 ms | 41.5 vs 32 tok/s "
            "| 120 vs 100 tok/s |") in md
    assert "| 2 | rejected | broken | 0.41 | – |" in md and "accepted 1 of 2 candidates" in md and "scaled down" in md
    page = write_summary(rec).read_text()
    assert "<pre>" not in page.split('id="iterations"')[1].split("</table>")[0]  # a real table, not markdown in a <pre>
    assert 'href="iter-001/report.html"' in page and 'src="objective.png"' in page and 'src="workloads.png"' in page
    assert (rec.path / "objective.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ">15 vs 20 ms<br>1.333× ± –" in page  # the candidate's figure beside the best's, ratio > 1 is faster for ttft
    it1 = (rec.path / "iter-001" / "report.html").read_text()
    assert "n/a (CPU)" in it1 and "0.0123" not in it1  # roofline on scaled-down CPU workloads is not a figure
    assert 'href="../summary.html"' in it1
    assert json.loads((rec.path / "run.json").read_text())["run_id"] == rec.run_id


def test_failed_baseline_is_not_called_rejected(tmp_path):
    rec = RunRecord.create(tmp_path, "tgt", {"agent": "offline", "seed": 0, "branch": "metainfer/tgt", "iterations": 3})
    from metainfer.build.decision import figures
    write_json(rec.iter_dir(0) / "report.json", {"iteration": 0, "accepted": False, "summary": "Render the engine",
                                                 "reason": "parity failed: max rel err 0.41 > tolerance 0.03",
                                                 "figures": figures(_gate(parity_ok=False)), "cumulative_speedup": None})
    rec.state.update({"status": "failed", "stop_reason": "the baseline did not pass"})
    assert "| 0 | BASELINE FAILED |" in summary_markdown(rec)
    page = write_summary(rec).read_text()
    row = page.split('id="iter-0"')[1].split("</tr>")[0]
    assert "baseline failed" in row and "rejected" not in row


def test_a_gate_that_finished_no_stage_is_not_said_not_to_have_run(tmp_path):
    rec = RunRecord.create(tmp_path, "tgt", {"agent": "offline", "seed": 0, "branch": "metainfer/tgt", "iterations": 1})
    for i, gate in ((0, {"ok": False, "seconds": 3601.0, "error": "gate timed out after 3600s and was killed"}), (1, None)):
        write_json(rec.iter_dir(i) / "report.json", {"iteration": i, "accepted": False, "summary": f"try {i}",
                                                     "reason": "gate timed out" if gate else "the agent proposed nothing",
                                                     "figures": {}, "cumulative_speedup": None, "gate": gate})
    write_summary(rec)
    timed_out = (rec.iter_dir(0) / "report.html").read_text()
    assert "The gate ran 3601.0 s and finished no stage: gate timed out after 3600s" in timed_out
    assert "did not run" not in timed_out
    assert "The gate did not run for this iteration (the agent proposed nothing)" in (rec.iter_dir(1) / "report.html").read_text()


def test_profile_and_per_layer_parity_are_plotted_when_the_gate_recorded_them(tmp_path):
    from metainfer.build.decision import figures

    rec = RunRecord.create(tmp_path, "m-nvfp4-h200", {"agent": "offline", "seed": 0, "branch": "b", "iterations": 1})
    g = _gate()
    g["bench"]["scaled_down"] = False
    g["device"] = "cuda"
    g["parity"]["prompts"] = [{"name": "len0017/alone", "layer_errors": [0.0, 0.001, 0.002, 0.004]},
                              {"name": "len0063/alone", "layer_errors": None}]
    g["profile"] = {"phases": {"decode": {"ops": [{"op": "moe_nvfp4", "ms": 1.02, "calls": 80, "roofline_fraction": 0.41},
                                                   {"op": "gdn_step", "ms": 0.11, "calls": 30, "roofline_fraction": 0.2}]},
                               "prefill": {"ops": [{"op": "gdn_chunk", "ms": 12.5, "calls": 30, "roofline_fraction": None}]}}}
    d = rec.iter_dir(0)
    write_json(d / "gate.json", g)
    write_json(d / "report.json", {"iteration": 0, "accepted": True, "summary": "baseline", "reason": "ok",
                                   "figures": figures(g), "cumulative_speedup": 1.0, "gate": {"ok": True, "seconds": 9.0}})
    write_summary(rec)
    page = (d / "report.html").read_text()
    assert (d / "profile.png").read_bytes()[:4] == b"\x89PNG" and (d / "layers.png").read_bytes()[:4] == b"\x89PNG"
    assert 'src="profile.png"' in page and 'src="layers.png"' in page
    rows = page.split('id="profile"')[1].split("</table>")[0]
    assert rows.index("moe_nvfp4") < rows.index("gdn_step")  # largest first within a phase
    assert "0.410" in rows and "n/a (CPU)" not in page  # a GPU profile's roofline is a figure
    assert ">0.012<" in page.split('id="workloads"')[1].split("</table>")[0]  # and so is the bench's


def test_a_run_is_found_by_path_id_or_a_unique_part_of_its_id(tmp_path):
    import pytest

    from metainfer.build.config import BuildError

    a = RunRecord.create(tmp_path, "m-bf16-cpu", {"agent": "offline", "seed": 0})
    b = RunRecord.create(tmp_path, "m-nvfp4-h200", {"agent": "offline", "seed": 0})
    assert RunRecord.open(tmp_path, str(a.path)).run_id == a.run_id
    assert RunRecord.open(tmp_path / "elsewhere", str(b.path)).run_id == b.run_id  # a path works from any runs folder
    assert RunRecord.open(tmp_path, a.run_id).path == a.path
    assert RunRecord.open(tmp_path, "nvfp4-h200").run_id == b.run_id
    with pytest.raises(BuildError, match="matches 2 runs"):
        RunRecord.open(tmp_path, "-m-")
    with pytest.raises(BuildError, match="no run 'nope'"):
        RunRecord.open(tmp_path, "nope")


def test_noise_run_note_states_the_margin_and_warns_when_the_machine_was_unsteady():
    from metainfer.build.decision import noise_run_note

    def gate(speedup, noise):
        return {"bench": {"objective": {"speedup": speedup, "noise": noise}}}

    steady = noise_run_note(gate(1.02, 0.03))
    assert "1.020× ± 3.0 %" in steady and "must exceed 0.000" in steady and "unsteady" not in steady
    off = noise_run_note(gate(1.3, 0.05))  # the same engine 30 % off itself, well beyond its own noise
    assert "must exceed 0.250" in off and "unsteady" in off
    assert "unsteady" in noise_run_note(gate(1.2, 0.77))  # a noise bar of 77 %: nothing steady was measured
    assert noise_run_note(None) is None and noise_run_note({"bench": {}}) is None


def test_a_report_that_cannot_be_written_is_said_and_ends_nothing(tmp_path):
    from metainfer.build.records import RunRecord
    from metainfer.build.report import write_summary_safely

    broken = RunRecord(tmp_path / "r-1", {"run_id": "r-1"})  # a run.json without its target: no page renders
    said: list[str] = []
    assert write_summary_safely(broken, said.append) is None
    assert len(said) == 1 and "could not write the report: KeyError" in said[0] and "metainfer report r-1" in said[0]


def test_report_shows_the_sharp_parity_checks_and_that_the_run_was_resumed(tmp_path):
    from metainfer.build.decision import figures

    rec = RunRecord.create(tmp_path, "m-nvfp4-cpu", {"agent": "offline", "seed": 0, "branch": "b", "iterations": 1})
    ok, red = _gate(), _gate()
    ok["parity"].update({"local_update_errors": [0.01, 0.03, 0.02], "local_update_tolerances": [0.04, 0.04, 0.08],
                         "local_logits_err": 0.0017, "tolerances": {"local_logits": 0.0048},
                         "consistency": {"decode alone": 0.009, "prefill alone": 0.001},
                         "consistency_tolerances": {"decode alone": 0.0125, "prefill alone": 0.0125}})
    red["parity"].update({**ok["parity"], "local_update_errors": [0.01, 0.05, 0.02]})  # layers.1 over its threshold
    for i, g in enumerate((ok, red)):
        d = rec.iter_dir(i)
        write_json(d / "gate.json", g)
        write_json(d / "report.json", {"iteration": i, "accepted": i == 0, "summary": f"s{i}", "reason": "r",
                                       "figures": figures(g), "cumulative_speedup": 1.0})
    rec.state["resumed"] = ["2026-12-02T10:00:00Z", "2026-12-02T11:00:00Z"]
    assert [c["check"].split(",")[0] for c in figures(ok)["sharp"]] == ["layer-local update", "final norm + lm_head",
                                                                        "consistency"]
    md = summary_markdown(rec)
    assert "resumed 2 times: 2026-12-02T10:00:00Z, 2026-12-02T11:00:00Z" in md
    page = write_summary(rec).read_text()
    assert 'id="resumed"' in page and "2 times" in page
    assert "worst 0.75 of its threshold" in page and "worst 1.25 of its threshold" in page  # layers.1: 0.03/0.04, 0.05/0.04
    it1 = (rec.path / "iter-001" / "report.html").read_text()
    assert "layer-local update, layers.1 (worst of 3)" in it1 and "0.05 (threshold 0.04: 1.25 of it)" in it1
    assert "consistency, decode alone (worst of 2)" in it1 and "final norm + lm_head" in it1
    anchored = dict(ok["parity"], reference_consistency={"prefill": 0.0004, "decode": 0.0061})
    (cons,) = [c for c in figures({**ok, "parity": anchored})["sharp"] if c["check"].startswith("consistency")]
    assert cons["check"] == "consistency, decode alone (worst of 2; HF's own 0.0061)"  # HF's figure of the same part
    from metainfer.build.report import iteration_markdown

    assert "| parity: final norm + lm_head | 0.0017 (threshold 0.0048: 0.35 of it) |" in iteration_markdown(
        "t", "r", json.loads((rec.path / "iter-000" / "report.json").read_text()))


def test_the_h200_gates_profile_and_parity_render(tmp_path):
    """The gate JSON of the profile stage's first H200 run (docs/results/h200-2026-12-02-c) renders: every profiled op
    of both phases in the table, the plots, the sharp checks."""
    from pathlib import Path

    from metainfer.build.decision import figures

    g = json.loads((Path(__file__).parents[1] / "docs/results/h200-2026-12-02-c/tiny-gate-profile.json").read_text())
    rec = RunRecord.create(tmp_path, "qwen3.6-35b-a3b-tiny-nvfp4-h200", {"agent": "offline", "seed": 0, "branch": "b",
                                                                         "iterations": 1})
    d = rec.iter_dir(0)
    write_json(d / "gate.json", g)
    write_json(d / "report.json", {"iteration": 0, "accepted": True, "summary": "baseline", "reason": "ok",
                                   "figures": figures(g), "cumulative_speedup": 1.0})
    write_summary(rec)
    page = (d / "report.html").read_text()
    rows = page.split('id="profile"')[1].split("</table>")[0]
    ops = [(ph, o["op"]) for ph, body in g["profile"]["phases"].items() for o in body["ops"]]
    assert len(ops) > 10 and all(f"<td>{ph}</td><td><code>{op}</code>" in rows for ph, op in ops)
    assert (d / "profile.png").is_file() and (d / "layers.png").is_file()
    assert page.count('class="sharp"') == 3 and "consistency, decode alone" in page

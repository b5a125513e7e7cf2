"""The parity gate: comparison functions on hand-made tensors, the HF reference, and end to end through
the real CLI on rendered tiny engines (good, broken at one layer, NaN, constant logits)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from harness.parity_metrics import (
    first_bad_layer, greedy_agreement, greedy_self_agreement, layer_errors, layer_name, max_abs, rel_l2, top2_margin, trivial_reason,
)
from harness.parity_result import ParityResult, PromptFigures, format_table
from harness.prompts import LENGTHS, default_lengths, make_prompts
from harness.tolerances import get_tolerance
from metainfer.cli import app
from metainfer.errors import CheckpointError, UnknownNameError

TINY = "qwen3.6-35b-a3b-tiny"


# ---- comparison functions on hand-made tensors -------------------------------------------------

def test_rel_l2_and_max_abs_exact_values():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(5, 64, generator=g)
    d = torch.randn(5, 64, generator=g)
    e = r + 0.01 * d
    assert rel_l2(e, r) == pytest.approx(0.01 * float(d.norm() / r.norm()), rel=1e-5)
    assert max_abs(e, r) == pytest.approx(0.01 * float(d.abs().max()), rel=1e-6)
    assert rel_l2(r, r) == 0.0


def test_nan_and_inf_never_pass():
    r = torch.randn(3, 32)
    for bad in (float("nan"), float("inf"), -float("inf")):
        e = r.clone()
        e[1, 7] = bad
        assert rel_l2(e, r) == math.inf and max_abs(e, r) == math.inf
        assert not rel_l2(e, r) <= 1e9
        assert "non-finite" in trivial_reason(e, r)
    assert first_bad_layer([0.0, float("nan"), 0.0], [1.0, 1.0, 1.0]) == 1


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="shape"):
        rel_l2(torch.ones(2, 3), torch.ones(3, 2))
    with pytest.raises(ValueError, match="zeros"):
        rel_l2(torch.ones(4), torch.zeros(4))
    with pytest.raises(ValueError, match="reference itself"):
        rel_l2(torch.ones(2), torch.tensor([1.0, float("nan")]))


def test_trivial_outputs_are_named():
    g = torch.Generator().manual_seed(1)
    r = torch.randn(4, 100, generator=g)
    assert trivial_reason(r + 0.01 * torch.randn(4, 100, generator=g), r) is None
    assert "constant" in trivial_reason(torch.zeros(4, 100), r)
    assert "constant" in trivial_reason(torch.full((4, 100), 3.5), r)
    flat_row = r.clone()
    flat_row[2] = 1.0 + 1e-6 * torch.randn(100, generator=g)  # near-zero variance at one position
    assert "position 2" in trivial_reason(flat_row, r)
    assert "every position" in trivial_reason(r[0].expand(4, 100).clone(), r)


def test_a_greedy_failure_names_batch_dependence_when_generate_alone_differs():
    from harness.parity_checks import note_batch_dependence
    from harness.parity_result import PromptFigures

    def fig(match: int, compared: int) -> PromptFigures:
        f = PromptFigures("len0003", "batched", 3)
        f.greedy_match, f.greedy_compared = match, compared
        f.failures.append(f"greedy token {match} differs")
        return f

    f = fig(1, 2)
    note_batch_dependence(f, [154, 915, 313], [154, 706, 938])  # alone took another token at the failing step
    assert "generate alone gave 706" in f.failures[-1] and "depend on the batch" in f.failures[-1]
    f = fig(1, 2)
    f.failures.append("batched vs alone rel err 0.2 > 0.01")  # a later check's failure: the note still finds its line
    note_batch_dependence(f, [154, 915, 313], [154, 706, 938])
    assert "generate alone gave 706" in f.failures[0] and f.failures[1] == "batched vs alone rel err 0.2 > 0.01"
    f = fig(1, 2)
    note_batch_dependence(f, [154, 915, 313], [154, 915, 313])  # the same tokens alone: a plain greedy failure
    assert f.failures == ["greedy token 1 differs"]
    f = PromptFigures("len0003", "batched", 3)
    f.greedy_match = f.greedy_compared = 1  # a tie, passing: nothing to explain
    note_batch_dependence(f, [154, 915], [154, 706])
    assert f.failures == []


def test_greedy_agreement_stops_at_first_tie():
    ref = [0, 1, 2, 3]
    r = torch.full((4, 6), -1.0)
    for j, t in enumerate(ref):
        r[j, t] = 1.0  # the reference's token leads by 2.0 everywhere ...
    r[2, 5] = 0.9  # ... except step 2, where id 5 is 0.1 behind
    e = r + 0.08 * torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])  # engine logit errors of 0.08
    assert greedy_agreement(ref, ref, e, r, floor_rel=0.0) == (4, 4)
    # step 2 picks id 5: 0.1 <= 0.08 + 0.08, a tie: comparison ends there and passes
    assert greedy_agreement([0, 1, 5, 4], ref, e, r, floor_rel=0.0) == (2, 2)
    # step 1 picks id 4: 2.0 > 0.16, not explained by the logit errors: fails
    assert greedy_agreement([0, 4, 2, 3], ref, e, r, floor_rel=0.0) == (1, 2)
    # the same tie with smaller errors is no longer excused, unless the floor covers it
    assert greedy_agreement([0, 1, 5, 3], ref, r, r, floor_rel=0.0) == (2, 3)
    assert greedy_agreement([0, 1, 5, 3], ref, r, r, floor_rel=0.2) == (2, 2)
    nan = e.clone()
    nan[2, 5] = float("nan")
    assert greedy_agreement([0, 1, 5, 3], ref, nan, r, floor_rel=1.0) == (2, 3)  # NaN is never a tie
    assert greedy_agreement([0, 1, 99, 3], ref, e, r, floor_rel=1.0) == (2, 3)  # out-of-vocab id
    # the engine's own batch-to-batch variation on a row widens the bound
    slack = torch.tensor([0.0, 0.0, 0.06, 0.0])  # each id may move by 0.06: the gap by 0.12 > 0.1
    assert greedy_agreement([0, 1, 5, 3], ref, r, r, floor_rel=0.0, slack=slack) == (2, 2)
    assert greedy_agreement([0, 4, 2, 3], ref, r, r, floor_rel=0.0, slack=slack) == (1, 2)
    # generate ran the row in another batch: exact at ids 2 and 5 but 0.04 rms off elsewhere, each id may move
    # by 3 x 0.04, so the 0.1 gap is a tie; the 2.0 lead of a wrong token is not
    rowwise = r.clone()
    rowwise[:, [0, 1, 3, 4]] += torch.tensor([0.04, -0.04, 0.04, -0.04]) * (6 / 4) ** 0.5
    assert greedy_agreement([0, 1, 5, 3], ref, rowwise, r, floor_rel=0.0) == (2, 2)
    assert greedy_agreement([0, 1, 5, 3], ref, rowwise, r, floor_rel=0.0, row_z=0.0) == (2, 3)
    assert greedy_agreement([0, 4, 2, 3], ref, rowwise, r, floor_rel=0.0) == (1, 2)
    with pytest.raises(ValueError, match="generated 3 tokens"):
        greedy_agreement([0, 1, 2], ref, e, r, floor_rel=0.0)


def test_greedy_self_agreement_holds_generate_to_the_engines_own_rows():
    ref = [0, 1, 2, 3]
    e = torch.full((4, 6), -1.0)
    for j, t in enumerate(ref):
        e[j, t] = 1.0
    e[2, 5] = 0.9  # the engine's own row prefers the reference's 2 over 5 by 0.1
    assert greedy_self_agreement(ref, ref, e, floor_rel=0.0) == (4, 0.0)
    # generate took 5 at step 2: 0.1 behind its own top-1 with no batch variation to excuse it -> fails there
    at, ratio = greedy_self_agreement([0, 1, 5, 3], ref, e, floor_rel=0.0)
    assert at == 2 and ratio == math.inf
    # the same step is excused by a floor, by the row's own alone-vs-batched slack or by the run's batch noise
    assert greedy_self_agreement([0, 1, 5, 3], ref, e, floor_rel=0.2)[0] == 4
    assert greedy_self_agreement([0, 1, 5, 3], ref, e, floor_rel=0.0, slack=torch.tensor([0.0, 0.0, 0.06, 0.0]))[0] == 4
    assert greedy_self_agreement([0, 1, 5, 3], ref, e, floor_rel=0.0, noise=0.02)[0] == 4
    assert greedy_self_agreement([0, 1, 5, 3], ref, e, floor_rel=0.0, noise=0.02, row_z=1.0)[0] == 2
    # a step the reference's history no longer reaches is not compared: after the first difference anything goes
    assert greedy_self_agreement([0, 1, 5, 0], ref, e, floor_rel=0.2)[0] == 4
    # a token that is the top-1 of the engine's row passes even where it differs from the reference
    e[1, 4] = 2.0
    assert greedy_self_agreement([0, 4, 0, 0], ref, e, floor_rel=0.0) == (4, 0.0)
    nan = e.clone()
    nan[0, 3] = float("nan")
    assert greedy_self_agreement(ref, ref, nan, floor_rel=1.0)[0] == 0  # NaN in the row: never within the bound
    assert greedy_self_agreement([0, 99, 2, 3], ref, e, floor_rel=1.0)[0] == 1  # out-of-vocab id
    with pytest.raises(ValueError, match="generated 3 tokens"):
        greedy_self_agreement([0, 1, 2], ref, e, floor_rel=0.0)


def test_top2_margin():
    r = torch.tensor([[3.0, 1.0, 2.5], [0.0, 10.0, -1.0]])
    assert top2_margin(r).tolist() == pytest.approx([0.5, 10.0])


def test_layer_errors_name_first_bad_layer():
    g = torch.Generator().manual_seed(2)
    r = torch.randn(5, 7, 16, generator=g)
    e = r.clone()
    e[3:] += 0.5 * torch.randn(2, 7, 16, generator=g)  # index 3 = output of layer 2, and what follows
    errs = layer_errors(e, r)
    assert errs[:3] == [0.0, 0.0, 0.0] and errs[3] > 0.1
    bad = first_bad_layer(errs, [0.05] * 5)
    assert bad == 3 and layer_name(bad) == "layers.2" and layer_name(0) == "embed_tokens"
    assert first_bad_layer([0.01] * 5, [0.05] * 5) is None


@pytest.mark.parametrize("batch, steps", [(11, 16), (23, 32), (24, 32), (2, 2), (1, 16), (5, 3)])
def test_batched_decode_runs_every_batch_size(batch, steps):
    """The batched teacher-forced run decodes at every batch size from N down to 1 (a path taken only at sizes parity
    never ran, ``tests/cheats/fp8_acts_mid_batch_decode.py``, is compared), each sequence's steps once and in order."""
    from harness.parity_engine import decode_schedule

    sched = decode_schedule(batch, steps)
    assert {len(call) for call in sched} == set(range(1, batch + 1))
    assert len(sched) == steps + min(batch, steps) - 1
    for i in range(batch):
        assert [j for call in sched for k, j in call if k == i] == list(range(steps))
    assert all(len({k for k, _ in call}) == len(call) for call in sched)


def test_teacher_forced_logits_put_each_staggered_row_in_its_place():
    """Rows of a staggered batched decode land at their sequence and step, whatever calls they came in."""
    from harness.parity_engine import teacher_forced_logits
    from harness.reference import ReferenceRun

    class Fake:
        def __init__(self):
            self.sizes, self.released = [], None

        def prefill(self, prompts, return_hidden=False, rows=None):
            return {"slots": [10 + i for i in range(len(prompts))], "logits": [torch.zeros(len(p), 3) for p in prompts]}

        def decode(self, slots, tokens):
            self.sizes.append(len(slots))
            return torch.tensor([[float(s), float(t), 0.0] for s, t in zip(slots, tokens)])

        def release(self, slots):
            self.released = slots

    seqs = [ReferenceRun(prompt=[1] * (i + 1), continuation=[100 * i + j for j in range(4)], logits=torch.zeros(1))
            for i in range(6)]
    eng = Fake()
    out = teacher_forced_logits(eng, seqs)
    assert sorted(set(eng.sizes)) == [1, 2, 3, 4, 5, 6] and eng.released == [10, 11, 12, 13, 14, 15]
    for i, (o, s) in enumerate(zip(out, seqs)):
        assert o.shape == (len(s.prompt) + 4, 3)
        assert o[len(s.prompt):, 0].tolist() == [10.0 + i] * 4 and o[len(s.prompt):, 1].tolist() == [float(t) for t in s.continuation]


def test_prompts_are_seeded_and_cover_block_sizes():
    a, b = make_prompts(7, 1024), make_prompts(7, 1024)
    assert [p.tokens for p in a] == [p.tokens for p in b]
    assert [p.tokens for p in make_prompts(8, 1024)] != [p.tokens for p in a]
    assert [len(p.tokens) for p in a] == list(LENGTHS)
    assert {63, 64, 65, 127, 128, 129, 1, 2, 3} <= set(LENGTHS) and max(LENGTHS) >= 256
    toks = torch.tensor([t for p in a for t in p.tokens])
    assert toks.min() >= 0 and toks.max() < 1024 and len(set(toks.tolist())) > 500
    with pytest.raises(ValueError):
        make_prompts(0, 1024, (3, 3))


def test_result_json_is_strict_json_and_table_names_failures():
    fig = PromptFigures("len0064", "batched", 64, prompt_rel_err=math.inf, decode_rel_err=0.5, max_abs_err=math.nan,
                        failures=["non-finite logits"], worst_layer="layers.3")
    res = ParityResult(False, math.inf, 0.3, 0.5, 0.6, fig.name, "layers.3", [fig], 7, "float32", "bfloat16", {}, 16, "cpu")
    text = json.dumps(res.to_json(), allow_nan=False)
    back = json.loads(text)
    assert back["max_rel_err"] == "inf" and back["prompts"][0]["ok"] is False and back["worst_layer"] == "layers.3"
    table = format_table(res)
    assert "FAIL" in table and "first bad layer layers.3" in table and "len0064/batched" in table
    ok = PromptFigures("len0017", "alone", 17, prompt_rel_err=0.01, decode_rel_err=0.01, max_abs_err=0.1)
    passed = ParityResult(True, 0.01, 0.7, 0.01, 0.7, ok.name, None, [ok], 7, "float32", "bfloat16", {}, 2, "cpu",
                          local_update_errors=[0.01, 0.012, 0.001], local_update_tolerances=[0.02, 0.025, 0.03],
                          local_logits_err=0.001)
    line = format_table(passed)
    assert "None" not in line and "nearest layer-local threshold: layers.0 at 0.50 of it" in line


def test_tolerance_lookup():
    tol = get_tolerance("bfloat16", "float32")
    assert 0 < tol.logits_prompt < 1 and 0 < tol.logits_decode < 1
    assert tol.hidden(0) < tol.hidden(1) < tol.hidden(2) <= tol.hidden(1000) == tol.hidden_cap
    with pytest.raises(UnknownNameError, match="decided"):
        get_tolerance("float16", "float32")
    assert get_tolerance("bfloat16", "bfloat16").logits_prompt > tol.logits_prompt
    # docs/PARITY.md: the accumulated figures are nets at K_NET = 4 times the anchor (logits: its worst row; the
    # per-prompt hidden states K_NET_HIDDEN = 8: a few-token prompt is judged on those tokens alone);
    # the layer-local figures K = 2 times the anchor, with the bf16 storage floor of each layer's hidden state
    assert tol.logits_prompt == tol.logits_decode == pytest.approx(0.70)
    assert tol.hidden(1) == pytest.approx(8 * (0.0196 + 0.0091)) and tol.hidden(6) < tol.hidden_cap
    assert tol.update(0) == pytest.approx(4 * (0.0196 + 0.0126)) and tol.update(0) < tol.update(3) < tol.update(1000) == tol.update_cap
    floor = 2.0**-8 / 3**0.5
    assert tol.local_update(3.0) == pytest.approx(2 * (0.0097**2 + (3.0 * floor) ** 2) ** 0.5)
    assert tol.local_update(1.0) < tol.local_update(8.0) < 2 * (0.0097 + 8.0 * floor)
    with pytest.raises(ValueError, match="storage ratio"):
        tol.local_update(0.0)
    gpu = tol.for_device("cuda:0")
    # on the H200 the Triton kernels' layer-local figures are the CPU engine's: no loosening there; consistency 0.0375
    assert gpu.local_update(3.0) == pytest.approx(tol.local_update(3.0)) and gpu.local_logits == tol.local_logits
    assert gpu.logits_prompt == tol.logits_prompt
    assert gpu.consistency == pytest.approx(0.0375) and tol.for_device("cpu") is tol
    # a single sequence's threshold: 0.0125 on the CPU (where the path checks were calibrated), 0.0375 on a GPU
    assert tol.consistency * tol.consistency_run_k == pytest.approx(0.0125) and gpu.consistency_run_k == 1.0
    assert tol.local_logits < tol.consistency < tol.local_update(1.0)
    # a figure pooled over few rows (quick parity) is held to a wider threshold, never a narrower one
    assert tol.consistency_for(64) == tol.consistency_for(154) == tol.consistency
    assert tol.consistency_for(2) == pytest.approx(tol.consistency * 32**0.5) and tol.consistency_for(1) > tol.consistency_for(2)
    assert gpu.consistency_for(4) == pytest.approx(0.0375 / tol.consistency * tol.consistency_for(4))
    # rows of one prompt are not independent: a figure of fewer than 8 prompts is widened by the prompt count
    assert tol.consistency_for(200, 11) == tol.consistency_for(200, 8) == tol.consistency
    assert tol.consistency_for(200, 2) == pytest.approx(2 * tol.consistency) and tol.consistency_for(2, 2) == tol.consistency_for(2)
    with pytest.raises(ValueError, match="one prompt"):
        tol.consistency_for(10, 0)
    with pytest.raises(ValueError, match="at least one row"):
        tol.consistency_for(0)


def test_pooled_rows_error_drops_the_worst_rows_and_never_passes_nan():
    from harness.parity_metrics import pooled_rows_error

    r = torch.arange(1.0, 41.0).reshape(10, 4)
    e = r * 1.01
    assert pooled_rows_error([e], [r]) == pytest.approx(0.01)
    bad = e.clone()
    bad[3] = r[3] + 100.0  # one row far off (a router tie resolved the other way)
    assert pooled_rows_error([bad], [r]) > 1.0
    assert pooled_rows_error([bad], [r], drop=0.1) == pytest.approx(0.01 * float(r[[0, 1, 2, 4, 5, 6, 7, 8, 9]].norm())
                                                                    / float(r[[0, 1, 2, 4, 5, 6, 7, 8, 9]].norm()))
    assert pooled_rows_error([bad], [r], drop=0.01, min_drop=1) == pytest.approx(0.01)  # 1 % of 10 rows: at least 1
    assert pooled_rows_error([bad], [r], min_drop=9) == pytest.approx(0.01)  # never all rows
    assert pooled_rows_error([e[:4], e[4:]], [r[:4], r[4:]]) == pytest.approx(0.01)  # pooled over pairs
    one = [r[:5] + 100.0, e[5:]]  # one pair's rows all off (a cut in one long prompt's decode)
    assert pooled_rows_error(one, [r[:5], r[5:]], drop=0.5) == pytest.approx(0.01, rel=1e-5)  # the run's worst half: all of it
    assert pooled_rows_error(one, [r[:5], r[5:]], drop=0.5, per_pair=True) > 1.0  # each pair's worst half: 2 stay
    nan = e.clone()
    nan[0, 0] = math.nan
    assert pooled_rows_error([nan], [r], drop=0.5) == math.inf
    with pytest.raises(ValueError, match="drop"):
        pooled_rows_error([e], [r], drop=1.0)
    with pytest.raises(ValueError, match="all zeros"):
        pooled_rows_error([e], [torch.zeros_like(r)])


def test_pooled_update_errors_leave_out_a_flipped_token_but_not_a_wrong_layer():
    from harness.parity_metrics import pooled_update_errors

    g = torch.Generator().manual_seed(1)
    r = torch.randn(5, 18, 8, generator=g, dtype=torch.float64).cumsum(0)  # [L + 1, T, H]: four layers, 18 tokens
    near = r + 1e-3 * torch.randn(r.shape, generator=g, dtype=torch.float64)  # bf16-like noise on every token
    flipped = near.clone()
    flipped[2:, 5] += 3.0 * torch.randn(3, 8, generator=g, dtype=torch.float64)  # token 5 routed otherwise from layer 1 on
    plain = pooled_update_errors([flipped[:, :9], flipped[:, 9:]], [r[:, :9], r[:, 9:]])
    kept = pooled_update_errors([flipped[:, :9], flipped[:, 9:]], [r[:, :9], r[:, 9:]], drop=0.01, min_drop=3)
    assert plain[0] < 0.01 and min(plain[1:]) > 0.1  # without the drop one token fails every later layer
    assert max(kept) < 0.01 and kept == pytest.approx(pooled_update_errors([near], [r], drop=0.01, min_drop=3), rel=0.2)
    wrong = near.clone()
    wrong[3] = wrong[2] + 1.2 * (r[3] - r[2])  # layer 2 writes 20 % too much on every token
    errs = pooled_update_errors([wrong], [r], drop=0.01, min_drop=3)
    assert errs[2] == pytest.approx(0.2, rel=0.05) and errs[0] < 0.01
    nan = near.clone()
    nan[4, 0, 0] = math.nan
    assert pooled_update_errors([nan], [r], drop=0.5)[3] == math.inf
    with pytest.raises(ValueError, match="expected"):
        pooled_update_errors([near[:, :3]], [r])


def test_local_update_errors_and_storage_ratios():
    from harness.parity_local_metrics import local_update_errors, storage_ratios

    g = torch.Generator().manual_seed(0)
    h = torch.randn(4, 50, 8, generator=g).cumsum(0)  # [L + 1, T, H]: three layers' residual updates
    local = h[1:].clone()  # the reference layers write exactly what the engine wrote
    assert local_update_errors([h], [local], drop=0.0) == [0.0, 0.0, 0.0]
    off = local.clone()
    off[1] = h[1] + 1.1 * (h[2] - h[1])  # layer 1 should have written 10 % more
    errs = local_update_errors([h], [off], drop=0.0)
    assert errs[0] == errs[2] == 0.0 and errs[1] == pytest.approx(0.1 / 1.1)
    ratios = storage_ratios([h])
    assert len(ratios) == 3 and ratios[0] == pytest.approx(float(h[1].norm() / (h[1] - h[0]).norm()))
    with pytest.raises(ValueError, match="expected"):
        local_update_errors([h], [local[:2]], drop=0.0)


def test_mixer_local_errors_pool_each_layer_apart():
    from harness.parity_local_metrics import mixer_local_errors

    g = torch.Generator().manual_seed(1)
    ref = [torch.randn(3, 40, 8, generator=g), torch.randn(3, 25, 8, generator=g)]  # [L, R, H] per prompt
    assert mixer_local_errors([r.clone() for r in ref], ref, drop=0.0) == [0.0, 0.0, 0.0]
    cut = [r.clone() for r in ref]
    for c in cut:
        c[2] *= 0.97  # layer 2's mixer 3 % low on every prompt
    errs = mixer_local_errors(cut, ref, drop=0.0)
    assert errs[0] == errs[1] == 0.0 and errs[2] == pytest.approx(0.03)
    cut[0][1, 5, 0] = math.nan
    assert mixer_local_errors(cut, ref, drop=0.0)[1] == math.inf
    with pytest.raises(ValueError, match="equal"):
        mixer_local_errors([ref[0][:2]], [ref[0]], drop=0.0)


def test_mixer_threshold_is_the_storage_free_layer_local_one_and_binding_on_cuda_against_fp32():
    from harness.tolerances import get_tolerance

    cpu = get_tolerance("bfloat16", "float32")
    assert cpu.mixer_local() == pytest.approx(cpu.local_update(1.0)) and not cpu.mixer_advisory
    assert 0.01 < cpu.mixer_local() < 0.03  # honest tiny engine at most 0.0115 (layers.3), a 3 % cut 0.031
    assert not cpu.for_device("cuda").mixer_advisory and not cpu.for_device("cpu").mixer_advisory
    # against a bf16 reference (the full-size parity stage) its honest H200 figures are not measured: advisory there
    bf = get_tolerance("bfloat16", "bfloat16")
    assert bf.for_device("cuda:0").mixer_advisory and not bf.for_device("cpu").mixer_advisory


def test_layer_local_outputs_reproduce_the_reference_on_its_own_states(reference):
    from harness.layer_local import local_outputs

    tokens = [5, 17, 900, 3, 3, 41, 7]
    h = reference.hidden_states(tokens)
    out = local_outputs(reference, tokens, h)
    assert out["outputs"].shape == h[1:].shape and out["logits"].shape == (len(tokens), reference.vocab_size)
    assert torch.allclose(out["outputs"], h[1:], atol=1e-4, rtol=1e-4)  # fed its own inputs: its own outputs
    assert torch.allclose(out["logits"], reference.logits(tokens), atol=1e-4, rtol=1e-4)
    # each layer's token mixer on its own input: what the layer writes before its MLP, so the mixer output and
    # the MLP's on h + mixer add up to the layer's update
    layers = reference.model.model.layers
    assert out["mixers"].shape == h[1:].shape and out["mixers"].abs().sum() > 0
    with torch.no_grad():
        for l, layer in enumerate(layers):
            mid = h[l] + out["mixers"][l]
            mlp = layer.mlp(layer.post_attention_layernorm(mid.unsqueeze(0)))
            mlp = (mlp[0] if isinstance(mlp, tuple) else mlp)[0]
            assert torch.allclose(mid + mlp, h[l + 1], atol=1e-4, rtol=1e-4), l
    moved = h.clone()
    moved[3] = moved[3] * 1.5  # layer 3's input changed: layer 3's output follows it, layer 2's does not
    other = local_outputs(reference, tokens, moved)
    assert torch.equal(other["outputs"][:3], out["outputs"][:3]) and not torch.allclose(other["outputs"][3], out["outputs"][3])
    with pytest.raises(ValueError, match="expected"):
        local_outputs(reference, tokens[:3], h)


def test_anchor_envelope_and_summary():
    from harness.anchor import hidden_envelope, summarize

    lines = [[0.0] + [0.01 + 0.005 * i for i in range(1, 5)]]  # [prompts][L + 1]
    lines.append([0.0, 0.002, 0.004, 0.006, 0.008])  # below the first everywhere
    a, b = hidden_envelope(lines)
    assert a == pytest.approx(0.01, abs=1e-9) and b == pytest.approx(0.005, abs=1e-9)
    assert all(x[i] <= a + b * i + 1e-12 for x in lines for i in range(1, 5))
    rows = [{"prompt_rel": p, "decode_rel": d, "max_abs": 1.0, "max_row_rel": 0.2, "layers": l, "flips": 1, "flips_beyond_ties": 0}
            for p, d, l in [(0.02, 0.05, lines[0]), (0.06, 0.03, lines[1])]]
    s = summarize(rows)
    assert s["prefill_rel_max"] == 0.06 and s["decode_rel_max"] == 0.05 and s["flips"] == 2
    assert s["hidden_max"] == lines[0] and s["max_slope"] == pytest.approx(0.015)
    with pytest.raises(ValueError):
        summarize([])


# ---- the HF reference ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    from harness.reference import Reference

    return Reference.from_checkpoint(tiny_checkpoint("bf16"), dtype=torch.float32)


def test_reference_hidden_states_and_greedy_are_consistent(reference):
    tokens = make_prompts(3, reference.vocab_size, (9,))[0].tokens
    hidden = reference.hidden_states(tokens)
    assert hidden.shape == (reference.num_layers + 1, 9, reference.model.config.hidden_size)
    with torch.no_grad():  # final norm + lm_head of the last hidden state = the logits
        logits = reference.model.lm_head(reference.model.model.norm(hidden[-1]))
    assert rel_l2(logits, reference.logits(tokens)) < 1e-5
    run = reference.run(tokens, 4)
    assert run.logits.shape == (13, reference.vocab_size)
    assert run.continuation == run.logits[8:12].argmax(-1).tolist()  # greedy = teacher-forced argmax in fp32
    with pytest.raises(ValueError, match="outside"):
        reference.logits([reference.vocab_size])


def test_reference_cached_continuation_is_the_uncached_greedy_loop(reference):
    """The cached draft gives the tokens of the plain definition (n + 1 uncached forwards, argmax of the last row)."""
    for prompt in make_prompts(11, reference.vocab_size, (1, 17, 70)):
        tokens = list(prompt.tokens)
        for _ in range(6):
            tokens.append(int(reference.logits(tokens)[-1].argmax()))
        run = reference.run(prompt.tokens, 6)
        assert run.continuation == tokens[len(prompt.tokens):]
        assert rel_l2(run.logits, reference.logits(tokens)) < 1e-6


def test_reference_repairs_a_draft_that_is_not_greedy(reference):
    """A draft token that is not the argmax of its teacher-forced row is redone from there (a near tie the
    cached path resolved the other way), one position per round at worst."""
    from harness.reference import Reference

    class Skewed(Reference):  # the first draft's third token is the runner-up, as a cache-path tie would give
        drafts = 0

        def _greedy_cached(self, tokens, n, keep=None):
            out, seen = super()._greedy_cached(tokens, n, keep)
            Skewed.drafts += 1
            if Skewed.drafts == 1:
                row = self.logits(list(tokens) + out[:2])[-1]
                out[2] = int(row.topk(2).indices[1])
            return out, seen

    skewed = Skewed(reference.model, reference.device, reference.dtype)
    tokens = make_prompts(12, reference.vocab_size, (9,))[0].tokens
    run = skewed.run(tokens, 5)
    assert Skewed.drafts == 2 and run.continuation == reference.run(tokens, 5).continuation
    assert run.continuation == run.logits[8:13].argmax(-1).tolist()
    # HF's own consistency keeps the cached rows that saw the final tokens only: decode rows 9 and 10 of the first
    # draft, 12 of the redraft (11 was the redraft's prefix row); all 9 prompt rows
    assert run.cached.decode_err2.numel() == 3 and reference.run(tokens, 5).cached.decode_err2.numel() == 4
    assert run.cached.prefill_err2.numel() == 9

    class Never(Reference):  # every drafted token is wrong: each round still fixes one more position
        def _greedy_cached(self, tokens, n, keep=None):
            out, seen = super()._greedy_cached(tokens, n, keep)
            return [(t + 1) % self.vocab_size for t in out], seen

    assert Never(reference.model, reference.device, reference.dtype).run(tokens, 3).continuation == \
        reference.run(tokens, 3).continuation


def test_reference_measures_its_own_consistency_and_a_gpu_threshold_is_anchored_to_it(reference):
    """HF's cached draft against its uncached forward, per row (harness.reference_cached): ~0 for the float32
    reference, the perturbation's size when its cached path is off; on a GPU the threshold follows it."""
    from harness.consistency import reference_consistency
    from harness.reference import Reference
    from harness.reference_cached import CachedRows
    from harness.tolerances import K_CONSISTENCY_ANCHOR, K_PREFILL_AMPLIFICATION

    tokens = make_prompts(5, reference.vocab_size, (17,))[0].tokens
    honest = reference.run(tokens, 6, rows=[0, 3, 16])
    c = honest.cached
    assert c.prefill_err2.numel() == 3 and c.decode_err2.numel() == 5  # the kept prompt rows; steps 1 .. n - 1
    assert float(c.decode_ref2.min()) > 0 and float((c.decode_err2 / c.decode_ref2).max()) < 1e-10
    back = CachedRows.from_wire(c.to_wire())
    assert all(torch.equal(back.part(n)[i], c.part(n)[i]) for n in ("prefill", "decode") for i in (0, 1))

    class Off(Reference):  # a cached decode path 1 % off (a recurrent state kept at a lower precision would be)
        def _greedy_cached(self, tokens, n, keep=None):
            out, seen = super()._greedy_cached(tokens, n, keep)
            return out, {q: r * 1.01 if q >= len(tokens) else r for q, r in seen.items()}

    off = Off(reference.model, reference.device, reference.dtype).run(tokens, 6, rows=[0, 3, 16])
    cpu = get_tolerance("bfloat16", "float32")
    figs = reference_consistency([off], cpu)
    assert figs["decode"] == pytest.approx(0.01, rel=1e-3) and figs["prefill"] < 1e-6
    gpu = cpu.for_device("cuda")
    assert gpu.consistency_threshold(200, figs["decode"]) == pytest.approx(K_CONSISTENCY_ANCHOR * 0.01, rel=1e-3)
    assert gpu.consistency_threshold(200, figs["prefill"]) == gpu.consistency_for(200)  # never below the floor
    assert cpu.consistency_threshold(200, figs["decode"], 11, left_out=1) == cpu.consistency_for(200)  # not anchored
    # a figure that left no prompt out is held as one sequence is (0.0125 on the CPU); a GPU's is the same either way
    assert cpu.consistency_threshold(200, None, 11) == pytest.approx(cpu.consistency_run_k * cpu.consistency_for(200))
    assert gpu.consistency_threshold(200, None, 11) == gpu.consistency_threshold(200, None, 11, left_out=1)
    assert gpu.consistency_threshold(2, None) == gpu.consistency_for(2)
    assert 5 < K_CONSISTENCY_ANCHOR < 6.5  # 0.0375 / 0.0065
    # prompt rows: HF's own prompt-row figure may be exactly 0 at full size, its decode figure measures the model's
    # amplification (docs/results/h200-2026-12-05-b: honest 0.0589 against a floor of 0.0375, HF 0.0 / 0.048)
    full = gpu.consistency_threshold(200, 0.0, 11, left_out=1, amplification=0.048)
    assert full == pytest.approx(K_PREFILL_AMPLIFICATION * 0.048) and 0.0589 < full < 0.12
    assert gpu.consistency_threshold(200, 0.03, 11, 1, amplification=0.001) == pytest.approx(K_CONSISTENCY_ANCHOR * 0.03)
    assert gpu.consistency_threshold(200, 0.0, 11, 1, amplification=float("nan")) == gpu.consistency_for(200, 11)
    assert cpu.consistency_threshold(200, 0.0, 11, left_out=1, amplification=0.048) == cpu.consistency_for(200, 11)
    with pytest.raises(ValueError, match="lack"):
        CachedRows.from_wire({"prefill_err2": [0.0]})


def test_reference_loading_is_strict(tiny_checkpoint):
    from harness.reference import Reference
    from metainfer.checkpoint import CheckpointReader

    reader = CheckpointReader(tiny_checkpoint("nvfp4"))
    sd = reader.hf_state_dict(torch.float32)
    assert any("experts.gate_up_proj" in k for k in sd)  # NVFP4 experts arrive fused and dequantized
    missing = dict(sd)
    missing.pop("model.layers.3.self_attn.q_norm.weight")
    with pytest.raises(CheckpointError, match="q_norm"):
        Reference.from_state_dict(reader.text_config, missing)
    extra = dict(sd, **{"model.layers.0.bogus.weight": torch.ones(2)})
    with pytest.raises(CheckpointError, match="bogus"):
        Reference.from_state_dict(reader.text_config, extra)


# ---- end to end: rendered engines through the real CLI ---------------------------------------

QUICK = ("--lengths", "1,3,65", "--steps", "4")


def _metainfer(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("metainfer")
    cmd = [exe, *args] if exe else [sys.executable, "-m", "metainfer.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    """quant -> a fresh copy of the rendered tiny CPU engine folder (rendered once per quant)."""
    root = tmp_path_factory.mktemp("engines")
    done: dict[str, Path] = {}

    def get(quant: str, copy_to: Path | None = None) -> Path:
        if quant not in done:
            proc = _metainfer("render", "--model", TINY, "--quant", quant, "--gpu", "cpu", "--out", str(root))
            assert proc.returncode == 0, proc.stderr
            done[quant] = root / f"{TINY}-{quant}-cpu"
        if copy_to is None:
            return done[quant]
        shutil.copytree(done[quant], copy_to)
        return copy_to

    return get


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["bf16", "nvfp4"])
def test_tiny_engine_passes_parity_through_cli(quant, rendered, tiny_checkpoint, tmp_path):
    out = tmp_path / "parity.json"
    proc = _metainfer("parity", "--engine", str(rendered(quant)), "--checkpoint", str(tiny_checkpoint(quant)),
                      "--json", str(out), "--seed", "11")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["ok"] is True and data["seed"] == 11 and data["reference_dtype"] == "float32"
    assert 0 < data["max_rel_err"] <= data["tolerance"] and 0 < data["max_decode_rel_err"] <= data["decode_tolerance"]
    assert len(data["prompts"]) == 2 * len(default_lengths("cpu")) and all(p["ok"] for p in data["prompts"])
    assert data["update_errors"] and not data["update_failures"] and data["prompt_nonce"] is not None
    assert "parity PASS" in proc.stdout


def _break(engine: Path, old: str, new: str, file: str = "model.py") -> None:
    model = engine / "engine" / file
    text = model.read_text()
    assert text.count(old) == 1, f"the engine template changed: {old!r} not found once in {model}"
    model.write_text(text.replace(old, new))


def test_broken_layer_fails_and_is_named(rendered, tiny_checkpoint, tmp_path):
    engine = rendered("bf16", tmp_path / "broken")
    old = "mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)"
    _break(engine, old, old + " * (3.0 if i == 5 else 1.0)")  # layer 5's MoE output tripled
    out = tmp_path / "parity.json"
    proc = CliRunner().invoke(app, ["parity", "--engine", str(engine), "--checkpoint", str(tiny_checkpoint("bf16")),
                                    "--json", str(out), "--seed", "3", *QUICK])  # the real CLI, in process
    assert proc.exit_code == 1, proc.output
    data = json.loads(out.read_text())
    assert data["ok"] is False and data["worst_layer"] == "layers.5"
    assert "parity FAIL" in proc.output and "layers.5" in proc.output
    bisected = [p for p in data["prompts"] if p["layer_errors"]]
    # the error jumps after layer 5 (index 6 of [embeddings, layers.0, ...]); before it an honest short prompt may
    # already sit at 0.1-0.3 (a router tie: docs/PARITY.md, K_NET_HIDDEN), inside its net, with fresh prompts each run
    assert bisected and all(p["layer_errors"][6] > max(0.5, 2 * max(p["layer_errors"][:6])) for p in bisected), \
        [[round(x, 3) for x in p["layer_errors"][:8]] for p in bisected]


def test_subtle_bug_passes_old_tolerance_but_fails_new(rendered, tiny_checkpoint, tmp_path):
    """Top-k routing weights left unnormalised (``norm_topk_prob`` ignored): on the init-v1 checkpoint logits
    moved by 15-25 %, inside the unscaled-init tolerances (0.43 / 0.69); on init v2 (skewed routing, wide
    norms) by about 30 %, caught by the per-prompt decode figure or the pooled per-layer update figure."""
    from harness.parity import run_parity

    engine = rendered("bf16", tmp_path / "unnormalised")
    _break(engine, "weights = weights / weights.sum(-1, keepdim=True)", "weights = weights", file="kernels/reference.py")
    res = run_parity(engine, tiny_checkpoint("bf16"), seed=3, lengths=(3, 65), steps=4)
    assert not res.ok, format_table(res)
    assert res.update_failures or any(not p.ok for p in res.prompts), format_table(res)
    assert all(any("rel err" in f for f in p.failures) for p in res.prompts if not p.ok)


def test_quick_parity_passes_in_process(rendered, tiny_checkpoint):
    from harness.parity import run_parity

    res = run_parity(rendered("nvfp4"), tiny_checkpoint("nvfp4"), seed=4, lengths=(2, 64))
    assert res.ok, format_table(res)
    assert 0 < res.max_rel_err <= res.tolerance and 0 < res.max_decode_rel_err <= res.decode_tolerance
    assert res.worst_layer is None and res.error is None
    assert [p.name for p in res.prompts] == ["len0002/alone", "len0002/batched", "len0064/alone", "len0064/batched"]


def test_wide_batch_holds_the_shortest_third_once_and_fills_the_rest_with_windows():
    from harness.parity_wide import WINDOW_MAX_PROMPT, WINDOW_PROMPT_ROWS, wide_batch
    from harness.reference import ReferenceRun
    lengths = (90, 1, 30, 4, 2, 7)
    refs = [ReferenceRun(prompt=[100 * j + t for t in range(n)], continuation=[100 * j + 90 + t for t in range(3)],
                         logits=torch.zeros(1, 50), rows=(0, n - 1) if n == 30 else None) for j, n in enumerate(lengths)]
    assert len(wide_batch(refs, 6, 1)) == 0 and len(wide_batch(refs, 3, 1)) == 0  # the batched run reaches it already
    wb = wide_batch(refs, 20, 7)
    assert wb.pool == [1, 4] and len(wb) == 20 and len(wb.windows) == 18  # lengths 1 and 2: the shortest third of six
    assert wb.seqs(refs)[:2] == [refs[1], refs[4]]
    for w in wb.windows:
        t = refs[w.source].prompt + refs[w.source].continuation
        k = len(w.prompt)
        assert w.source != 2  # a prompt whose rows were sampled has no full row set to cut windows from
        assert 1 <= k <= min(len(refs[w.source].prompt), WINDOW_MAX_PROMPT) and w.prompt == t[:k] and w.continuation == t[k : k + 3]
        assert w.rows == tuple(range(max(0, k - WINDOW_PROMPT_ROWS), k)) and w.split == len(w.rows)
        assert w.positions() == [*w.rows, k, k + 1, k + 2]
    cuts = {(w.source, len(w.prompt)) for w in wb.windows}
    assert len(cuts) == 18  # 16 + 1 + 4 + 2 + 7 cut points: none twice
    assert wide_batch(refs, 20, 7) == wb and wide_batch(refs, 20, 8) != wb  # the seed decides, nothing else
    assert len(wide_batch(refs[:2], 3, 1).pool) == 1  # at least one pool prompt
    few = wide_batch(refs[1:2] + refs[4:5], 9, 1)  # 3 cut points for 8 windows: each taken before any repeats
    counts = [sum((w.source, len(w.prompt)) == c for w in few.windows) for c in ((0, 1), (1, 1), (1, 2))]
    assert sorted(counts) == [2, 3, 3]


def test_decode_batches_above_the_prompt_count_are_compared(rendered, tiny_checkpoint, tmp_path):
    """An engine loaded for more slots than parity has prompts (at full size 33 for the bench's conc32, against 23
    prompts) runs a batch filling every slot: the shortest third of the prompts once each and fresh prompts drawn in the
    judge. A cut armed only in decode steps of more than N = 3 sequences passes the alone and batched runs and fails
    the wide one."""
    from harness.parity import run_parity
    from harness.workloads import Capacity

    engine = rendered("bf16", tmp_path / "wide_cut")
    old = "mlp_out = moe_forward(x, layer.moe, d, self.launch, batch.n_valid, self.tunables.moe_ops_min_tokens)"
    _break(engine, old, old + " * (1.3 if batch.decode and x.shape[0] > 3 else 1.0)")
    kw = dict(seed=5, lengths=(1, 3, 17), steps=4, prompt_nonce=1)  # fixed prompts: the honest margin below is theirs
    blind = run_parity(engine, tiny_checkpoint("bf16"), **kw)
    assert blind.ok, format_table(blind)  # batches of 1-3 only: the cut never runs
    res = run_parity(engine, tiny_checkpoint("bf16"), load_capacity=Capacity(7, 32), **kw)
    wide = [p for p in res.prompts if p.mode == "wide7"]
    assert not res.ok and [p.prompt for p in wide] == ["len0001"], format_table(res)  # and 6 fresh ones
    assert all(p.ok for p in res.prompts if p.mode != "wide7")
    # the sharp net: the wide decode rows against the engine's own hidden-state prefill of the same tokens
    x, t = res.consistency["decode wide"], res.consistency_tolerances["decode wide"]
    assert x > 3 * t and any("consistency (decode wide)" in f for f in res.update_failures), format_table(res)
    honest = run_parity(rendered("bf16"), tiny_checkpoint("bf16"), load_capacity=Capacity(7, 32), **kw)
    assert honest.ok and sum(p.mode == "wide7" for p in honest.prompts) == 1, format_table(honest)
    assert honest.consistency["decode wide"] <= honest.consistency_tolerances["decode wide"] / 2, honest.consistency


@pytest.mark.parametrize("poison, reason", [
    ('.index_fill(-1, torch.tensor([7], device=x.device), float("nan"))', "non-finite"),
    (" * 0.0 + 1.0", "constant"),
])
def test_nan_and_constant_logits_fail(poison, reason, rendered, tiny_checkpoint, tmp_path):
    from harness.parity import run_parity

    engine = rendered("bf16", tmp_path / "poisoned")
    _break(engine, "return ForwardOut(self.lm_head(x),", f"return ForwardOut(self.lm_head(x){poison},")
    res = run_parity(engine, tiny_checkpoint("bf16"), seed=2, lengths=(1, 65), steps=4)
    assert not res.ok and all(not p.ok for p in res.prompts)
    assert all(any(reason in f for f in p.failures) for p in res.prompts)
    if reason == "non-finite":
        assert res.max_rel_err == math.inf and json.loads(json.dumps(res.to_json()))["max_rel_err"] == "inf"


def test_bad_input_exits_2(rendered, tiny_checkpoint, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _metainfer("parity", "--engine", str(empty), "--checkpoint", str(tiny_checkpoint("bf16")))
    assert proc.returncode == 2 and "metainfer render" in proc.stderr  # no engine package
    proc = _metainfer("parity", "--engine", str(rendered("bf16")), "--checkpoint", str(empty))
    assert proc.returncode == 2 and "error:" in proc.stderr and "config.json" in proc.stderr  # not a checkpoint


def test_logit_rows_keep_everything_that_fits_and_sample_the_rest():
    from harness.parity_rows import EDGE_ROWS, logit_rows

    assert logit_rows(960, 1024, seed=1) is None  # the tiny model: every row
    full_v = 248_320
    assert logit_rows(200, full_v, seed=1) is None
    rows = logit_rows(4000, full_v, seed=7)
    assert rows == sorted(set(rows)) and rows[-1] == 3999 and rows[:EDGE_ROWS] == list(range(EDGE_ROWS))
    assert len(rows) == (1 << 28) // (4 * full_v) and rows[-EDGE_ROWS:] == list(range(4000 - EDGE_ROWS, 4000))
    assert logit_rows(4000, full_v, seed=8) != rows and logit_rows(4000, full_v, seed=7) == rows  # secret, reproducible
    with pytest.raises(ValueError, match="prompt_len"):
        logit_rows(0, full_v, seed=1)


def test_reference_hidden_states_of_a_run_come_from_its_checking_forward(reference):
    """``hidden_states`` of a run's prompt + continuation costs no forward (the run's checking forward captured them),
    equals a fresh forward's, and is used once (the next call runs its own forward)."""
    forwards = []
    handle = reference.model.model.embed_tokens.register_forward_hook(lambda *_: forwards.append(1))
    try:
        tokens = make_prompts(6, reference.vocab_size, (23,))[0].tokens
        run = reference.run(tokens, 4)
        seq, before = tokens + run.continuation, len(forwards)
        memo = reference.hidden_states(seq)
        assert len(forwards) == before
        fresh = reference.hidden_states(seq)
        assert len(forwards) == before + 1 and torch.equal(memo, fresh) and memo.dtype == torch.float32
        assert memo.shape == (reference.num_layers + 1, 27, reference.model.config.hidden_size) and memo.abs().sum() > 0
    finally:
        handle.remove()


def test_reference_rows_are_the_full_outputs_cut(reference):
    tokens = make_prompts(5, reference.vocab_size, (40,))[0].tokens
    rows = [0, 3, 17, 38, 39]
    full, cut = reference.run(tokens, 3), reference.run(tokens, 3, rows)
    assert cut.continuation == full.continuation and cut.split == 5 and full.split == 40
    assert torch.equal(cut.logits, torch.cat([full.logits[rows], full.logits[40:]]))
    seq = tokens + full.continuation
    assert torch.equal(reference.hidden_states(seq, rows), reference.hidden_states(seq)[:, rows])
    with pytest.raises(ValueError, match="last prompt row"):
        reference.run(tokens, 3, [0, 5])
    with pytest.raises(ValueError, match="ascending"):
        reference.run(tokens, 3, [5, 3, 39])


def test_engine_load_waits_for_the_reference_only_on_a_shared_gpu():
    from harness.parity import same_gpu

    # one GPU time-slices its processes: the engine loads after the reference runs there, beside them elsewhere
    assert same_gpu("cuda", "cuda") and same_gpu("cuda:1", "cuda:1") and same_gpu("cuda", "cuda:0")
    assert not same_gpu("cuda:0", "cuda:1") and not same_gpu("cpu", "cpu") and not same_gpu("cpu", "cuda")


def test_wide_windows_hold_their_greedy_token_and_shape():
    """A window of the wide batch is judged on its rows against its source's hidden-state prefill rows (consistency)
    and its ``generate`` token against its own teacher-forced row; rows of the wrong shape are a failure."""
    from harness.parity_checks import judge_windows
    from harness.parity_wide import Window
    from harness.tolerances import get_tolerance

    tol = get_tolerance("bfloat16", "float32")
    g = torch.Generator().manual_seed(3)
    wins = [Window(j, [4, 9, 2], [7, 1], (1, 2)) for j in range(3)]
    rows = [torch.randn(4, 40, generator=g) for _ in wins]  # [S + n, V]: 2 prompt rows, 2 decode rows
    top = [[int(r[1].argmax()), int(r[2].argmax())] for r in rows]  # row S - 1 predicts the first token
    assert judge_windows(wins, rows, [r.clone() for r in rows], top, 3, tol, 0.0) == []
    assert judge_windows(wins, [None] * 3, [r.clone() for r in rows], top, 3, tol, 0.0) == []  # no partner: judged elsewhere
    wrong = [t[:] for t in top]
    wrong[1][0] = int(rows[1][1].argmin())
    (msg,) = judge_windows(wins, rows, [r.clone() for r in rows], wrong, 3, tol, 0.0)
    assert msg.startswith("wide3 window 1 (prompt 1, first 3 tokens): greedy token 0") and "not a top-1" in msg
    short = [r.clone() for r in rows]
    short[2] = short[2][1:]
    (msg,) = judge_windows(wins, rows, short, top, 3, tol, 0.0)
    assert "window 2" in msg and "shape (3, 40)" in msg


def test_redraft_ties_are_within_two_bf16_steps_of_the_rows_top():
    """The reference's greedy redraft stops on a row that moved back (only rounding does that) only when every token
    is its row's top or within ``REDRAFT_TIE_REL`` of it; a real difference still raises."""
    from harness.reference import REDRAFT_TIE_REL, near_ties

    rows = torch.tensor([[4.0, 1.0, -2.0], [0.5, 3.0, 2.999], [-1.0, 0.0, 1.0]])  # [n, V]
    assert near_ties(rows, [0, 1, 2]) and near_ties(rows, [0, 2, 2])  # 3.0 - 2.999 <= 2^-7 * 3
    assert not near_ties(rows, [0, 0, 2]) and not near_ties(rows, [1, 1, 2])
    edge = torch.tensor([[8.0, 8.0 - 8 * REDRAFT_TIE_REL * 1.01]])
    assert not near_ties(edge, [1]) and near_ties(edge * 0 + torch.tensor([[8.0, 8.0 - 8 * REDRAFT_TIE_REL]]), [1])


def test_row_variation_is_the_worst_rows_relative_difference():
    """``row_variation``: the largest ``‖e − o‖ / ‖e‖`` over rows, so that one row decoded at another batch size counts
    in full however many rows agree; rows with a non-finite entry or a zero row are left to other checks."""
    from harness.parity_metrics import row_variation

    g = torch.Generator().manual_seed(5)
    e = torch.randn(6, 40, generator=g)
    o = e.clone()
    assert row_variation(e, o) == 0.0
    o[3] += 0.02 * e[3].norm() / 40 ** 0.5 * torch.randn(40, generator=g).sign()  # one row moved by 2 % of its rms
    assert row_variation(e, o) == pytest.approx(0.02, rel=1e-6)
    assert row_variation(e, o) > 2 * float(((e - o).norm() / e.norm()))  # the block's pooled figure dilutes it
    o[1, 4] = math.nan
    e[5] = 0.0
    assert row_variation(e, o) == pytest.approx(0.02, rel=1e-6)
    assert row_variation(e, o[:5]) == 0.0 and row_variation(e[:0], o[:0]) == 0.0


def test_one_minus_inf_logit_does_not_widen_the_greedy_self_bound():
    """An engine row with a masked (-inf) logit somewhere keeps its finite scale: the floor and path allowances take
    max|e| and rms over the finite entries only, so a token far below the top still fails (before, inf bound)."""
    ref = [0, 1]
    e = torch.randn(2, 64, generator=torch.Generator().manual_seed(3))
    e[0, 0], e[1, 1], e[1, 7] = 5.0, 5.0, -2.0
    e[1, 40] = -math.inf
    at, ratio = greedy_self_agreement([0, 7], ref, e, floor_rel=0.01, path=0.01)
    assert at == 1 and math.isfinite(ratio) and ratio > 1.0
    assert greedy_self_agreement(ref, ref, e, floor_rel=0.01, path=0.01) == (2, 0.0)

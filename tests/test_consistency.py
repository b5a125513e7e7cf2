"""The consistency figure pooled by source (harness.consistency): a prompt whose decode a routing flip moved is left
out one in eight, a cut on every prompt stays in, NaN never passes, and wide windows pool with their source."""

import math

import pytest
import torch

from harness.consistency import pooled_by_source, row_squares


def _rows(n: int, rel: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` rows of 50 logits and an engine copy off by ``rel`` (relative L2) on every row."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(n, 50, generator=g) + 0.3
    noise = torch.randn(n, 50, generator=g)
    eng = ref + noise * (rel * ref.norm(dim=-1, keepdim=True) / noise.norm(dim=-1, keepdim=True))
    return row_squares(eng, ref)


def _figure(rels: list[float], n: int = 16, per: int = 8, sources=None):
    sq = [_rows(n, r, i) for i, r in enumerate(rels)]
    return pooled_by_source([e for e, _ in sq], [r for _, r in sq], sources or list(range(len(rels))), drop=0.1, per=per)


def test_one_flipped_prompt_in_eight_is_left_out_but_not_in_seven():
    honest = [0.005 + 0.0005 * i for i in range(7)]
    fig = _figure(honest + [0.09])
    assert fig.dropped == (7,) and fig.sources == 7 and fig.value < 0.008
    assert _figure(honest).dropped == () and _figure(honest[:6] + [0.09]).value > 0.03  # 7 prompts: nothing left out
    assert _figure(honest + [0.09], per=0).value > 0.03  # per 0: the old pooling, the flip inflates the run


def test_a_cut_on_every_prompt_stays_in_and_two_flips_in_nine_are_not_both_forgiven():
    cut = _figure([0.011 + 0.0003 * i for i in range(12)])
    assert cut.value > 0.0105 and len(cut.dropped) == 1
    two = _figure([0.005] * 7 + [0.09, 0.08])
    assert two.dropped == (7,) and two.value > 0.02


def test_nan_anywhere_is_inf_even_in_the_prompt_that_would_be_left_out():
    sq = [_rows(16, 0.005, i) for i in range(9)]
    bad = sq[8][0].clone()
    bad[3] = float("nan")
    sq[8] = (bad, sq[8][1])
    fig = pooled_by_source([e for e, _ in sq], [r for _, r in sq], list(range(9)), drop=0.1, per=8)
    assert math.isinf(fig.value)


def test_windows_of_one_source_pool_with_it_and_count_as_one_sequence_of_rows():
    # 8 sources, source 0 with three 4-row windows (2 rows dropped of... 1 of 4 each), each other one 16-row sequence
    rels = [0.005] * 3 + [0.006] * 7
    sq = [_rows(4, r, i) for i, r in enumerate(rels[:3])] + [_rows(16, r, 10 + i) for i, r in enumerate(rels[3:])]
    fig = pooled_by_source([e for e, _ in sq], [r for _, r in sq], [0, 0, 0, 1, 2, 3, 4, 5, 6, 7], drop=0.1, per=8)
    assert fig.sources == 7 and len(fig.dropped) == 1
    assert fig.rows <= 7 * 14  # each kept source is worth at most one 16-row sequence (14 kept)


def test_bad_input_is_refused_with_its_reason():
    e, r = _rows(4, 0.01, 0)
    with pytest.raises(ValueError, match="matching"):
        pooled_by_source([e], [r, r], [0], drop=0.1)
    with pytest.raises(ValueError, match="non-finite"):
        pooled_by_source([e], [torch.full_like(r, float("inf"))], [0], drop=0.1)
    with pytest.raises(ValueError, match="drop"):
        pooled_by_source([e], [r], [0], drop=1.0)
    with pytest.raises(ValueError, match="one shape"):
        row_squares(torch.zeros(2, 3), torch.zeros(2, 4))


def test_a_prompt_over_the_cap_is_never_left_out():
    """A cut confined to one prompt (attention limited to a window shorter than it) moves that prompt far more than an
    honest flip does: over the cap it stays in, and the next worst prompt under the cap is left out instead."""
    honest = [0.005 + 0.0005 * i for i in range(8)]
    assert _figure(honest + [0.155], per=8).dropped == (8,)  # no cap: the cut prompt is left out
    sq = [_rows(16, r, i) for i, r in enumerate(honest + [0.155])]
    capped = pooled_by_source([e for e, _ in sq], [r for _, r in sq], list(range(9)), drop=0.1, per=8, cap=0.12)
    assert 8 not in capped.dropped and capped.value > 0.04


def _logit_run(prompt_rel: float, decode_rel: float, seed: int, p: int = 12, n: int = 8):
    """(one-call prefill logits, teacher-forced logits) of one sequence, [p + n, 50], the teacher-forced rows off by
    ``prompt_rel`` on the prompt rows and ``decode_rel`` on the n decode rows."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(p + n, 50, generator=g) + 0.3
    noise = torch.randn(p + n, 50, generator=g)
    rel = torch.tensor([prompt_rel] * p + [decode_rel] * n).unsqueeze(-1)
    return ref, ref + noise * (rel * ref.norm(dim=-1, keepdim=True) / noise.norm(dim=-1, keepdim=True))


def test_prompt_rows_on_a_gpu_are_anchored_to_hfs_decode_figure_as_well():
    """HF's prompt-row figure may be exactly 0 at full size while the engine's batched prompt rows differ by its batch
    variation (docs/results/h200-2026-12-05-b: honest 0.0589 against the 0.0375 floor): prompt rows take HF's decode
    figure as the model's amplification, decode rows do not, and a prompt-row cut well past it still fails."""
    from harness.consistency import consistency_figures
    from harness.tolerances import K_PREFILL_AMPLIFICATION, get_tolerance

    gpu = get_tolerance("bfloat16", "bfloat16").for_device("cuda")
    own = {"prefill": 0.0, "decode": 0.048}  # the false reject's HF figures
    honest = {"batched": [(*_logit_run(0.059, 0.057, s), s) for s in range(9)]}
    figs = consistency_figures(honest, 8, gpu, own)
    assert figs.figures["prefill batched"] == pytest.approx(0.059, rel=0.05)
    assert figs.tolerances["prefill batched"] == pytest.approx(K_PREFILL_AMPLIFICATION * 0.048)
    assert figs.figures["prefill batched"] < figs.tolerances["prefill batched"]
    assert figs.tolerances["decode batched"] == pytest.approx(gpu.consistency_anchor_k * 0.048)
    without = consistency_figures(honest, 8, gpu, {"prefill": 0.0})  # no HF decode figure: the floor alone
    assert without.figures["prefill batched"] > without.tolerances["prefill batched"] == pytest.approx(gpu.consistency)
    cut = consistency_figures({"batched": [(*_logit_run(0.15, 0.057, s), s) for s in range(9)]}, 8, gpu, own)
    assert cut.figures["prefill batched"] > cut.tolerances["prefill batched"]
    cpu = get_tolerance("bfloat16", "float32")  # the CPU has no anchor: its threshold is the floor
    assert consistency_figures(honest, 8, cpu, own).tolerances["prefill batched"] == pytest.approx(cpu.consistency)
    alone = consistency_figures({"alone": honest["batched"]}, 8, gpu, own)  # a prompt's own rows: no batch variation
    assert alone.tolerances["prefill alone"] == pytest.approx(gpu.consistency)
    assert alone.figures["prefill alone"] > alone.tolerances["prefill alone"]


def test_the_path_noise_takes_the_batch_noise_in_quadrature_and_capped():
    """``path_noise``: the decode consistency part and the batch noise (a row's largest variation between two batches
    of the teacher-forced runs) add in quadrature, each capped at ``path_cap``; a batch-invariant engine's (0) or an
    unmeasured one (NaN) leaves the consistency part alone. The serving script's threshold widens by the same capped
    figure (``batch_allowance``)."""
    from harness.parity_checks import batch_allowance, path_noise
    from harness.parity_result import RunFigures
    from harness.tolerances import get_tolerance

    cpu = get_tolerance("bfloat16", "float32")
    cons = {"decode alone": 0.006, "decode batched": 0.008, "prefill alone": 0.5}
    assert path_noise(RunFigures(consistency=cons, path_cap=0.0144), cpu) == pytest.approx(0.008)
    assert path_noise(RunFigures(consistency=cons, path_cap=0.0144, batch_noise=0.0), cpu) == pytest.approx(0.008)
    run = RunFigures(consistency=cons, path_cap=0.0144, batch_noise=0.006)
    assert path_noise(run, cpu) == pytest.approx(0.01) and batch_allowance(run, cpu) == pytest.approx(0.006)
    padded = RunFigures(consistency=cons, path_cap=0.0144, batch_noise=0.3)  # noise added to the batched rows buys
    assert path_noise(padded, cpu) == pytest.approx(math.hypot(0.008, 0.0144))  # no more than the cap
    assert batch_allowance(padded, cpu) == pytest.approx(0.0144)
    assert path_noise(RunFigures(batch_noise=0.003), cpu) == pytest.approx(math.hypot(cpu.consistency, 0.003))


def test_run_threshold_and_the_path_cap_follow_the_decode_figures():
    """``run_threshold``: the decode threshold with no prompt left out, over the modes; ``path_cap``: the decode
    thresholds without HF's 5.8x anchor but with its 2x amplification one, so that an engine padding its decode rows
    with noise under the loose full-size threshold buys no wider allowance (``parity_checks.path_noise``)."""
    from harness.consistency import consistency_figures
    from harness.parity_checks import path_noise
    from harness.parity_result import RunFigures
    from harness.tolerances import K_PREFILL_AMPLIFICATION, get_tolerance

    gpu = get_tolerance("bfloat16", "bfloat16").for_device("cuda")
    own = {"prefill": 0.02, "decode": 0.05}
    runs = {"alone": [(*_logit_run(0.01, 0.055, s), s) for s in range(9)],
            "batched": [(*_logit_run(0.04, 0.058, s + 20), s) for s in range(9)],
            "skipped": [(torch.ones(3, 50), torch.ones(4, 50), 0)]}  # unequal shapes: another check reports them
    figs = consistency_figures(runs, 8, gpu, own)
    assert set(figs.figures) == {"prefill alone", "decode alone", "prefill batched", "decode batched"}
    assert figs.run_threshold == pytest.approx(gpu.consistency_anchor_k * 0.05)
    assert figs.path_cap == pytest.approx(K_PREFILL_AMPLIFICATION * 0.05)
    run = RunFigures(consistency=figs.figures, path_cap=figs.path_cap)
    assert path_noise(run, gpu) == pytest.approx(max(figs.figures["decode alone"], figs.figures["decode batched"]))
    padded = consistency_figures({"alone": [(*_logit_run(0.01, 0.25, s), s) for s in range(9)]}, 8, gpu, own)
    assert padded.figures["decode alone"] < padded.tolerances["decode alone"]  # passes the loose threshold ...
    assert path_noise(RunFigures(consistency=padded.figures, path_cap=padded.path_cap), gpu) == pytest.approx(0.1)
    assert consistency_figures(runs, 0, gpu, own).figures.keys() == {"prefill alone", "prefill batched"}
    assert math.isnan(consistency_figures(runs, 0, gpu, own).run_threshold)
    cpu = get_tolerance("bfloat16", "float32")  # on the CPU the cap is the threshold itself: it never binds
    c = consistency_figures(runs, 8, cpu, own)
    assert c.path_cap == pytest.approx(max(c.tolerances["decode alone"], c.tolerances["decode batched"]))


def _source_with_windows(flip: dict[int, float], cut: float = 0.0):
    """One 18-row source (its own sequence, rows 0-17) and windows of 4 prompt rows + 2 decode rows at every cut
    k in 4..16, each row off by 0.006 (+ ``cut``), the positions in ``flip`` off by their value in every sequence
    that holds them (one near-tie in the source's own row: every window row at that position compares with it)."""
    g = torch.Generator().manual_seed(5)
    ref = torch.randn(18, 50, generator=g) + 0.3
    seqs = [list(range(18))] + [list(range(k - 4, k)) + [k, k + 1] for k in range(4, 17)]
    err2, ref2 = [], []
    for pos in seqs:
        r = ref[pos]
        rel = torch.tensor([flip.get(p, 0.006 + cut) for p in pos]).unsqueeze(-1)
        noise = torch.randn(r.shape, generator=g)
        e, rr = row_squares(r + noise * rel * r.norm(dim=-1, keepdim=True) / noise.norm(dim=-1, keepdim=True), r)
        err2.append(e)
        ref2.append(rr)
    return err2, ref2, [0] * len(seqs), seqs


def test_a_near_tie_in_a_sources_own_row_is_one_event_for_every_window_that_covers_it():
    err2, ref2, src, pos = _source_with_windows({9: 0.24, 10: 0.13})
    by_row = pooled_by_source(err2, ref2, src, drop=0.1, per=8)
    by_pos = pooled_by_source(err2, ref2, src, drop=0.1, per=8, positions=pos)
    assert by_row.value > 0.03  # each window drops one of its rows; the pair's second row stays in six windows
    assert by_pos.value < 0.0075  # the source's two worst positions left out, in every window
    # a cut moves every position: left out by position, it stays at its own level
    err2, ref2, src, pos = _source_with_windows({}, cut=0.006)
    assert pooled_by_source(err2, ref2, src, drop=0.1, per=8, positions=pos).value > 0.011
    with pytest.raises(ValueError, match="one position per row"):
        pooled_by_source(err2, ref2, src, drop=0.1, per=8, positions=[p[:-1] for p in pos])

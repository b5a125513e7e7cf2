"""Parity prompt lengths: the seed-drawn long prompt and the per-device sets (harness/prompts.py)."""

from __future__ import annotations

import pytest

from harness.prompts import CPU_LENGTHS, GPU_LENGTHS, LENGTHS, SeedDrawn, default_lengths, default_steps, make_prompts, resolve_lengths


def test_seed_drawn_length_is_reproducible_in_range_and_moves_with_the_seed():
    long = SeedDrawn(640, 960)
    assert int(long) == 960 and max(CPU_LENGTHS) == 960  # sizes the engine's context for any draw
    draws = {long.draw(s) for s in range(40)}
    assert all(640 <= d <= 960 for d in draws) and len(draws) > 20
    a, b = make_prompts(5, 1024, CPU_LENGTHS), make_prompts(5, 1024, CPU_LENGTHS)
    assert [p.tokens for p in a] == [p.tokens for p in b]
    assert len(a[-2].tokens) == long.draw(5) and a[-2].name == f"len{long.draw(5):04d}"
    assert 4 <= len(a[-1].tokens) <= 62  # the short drawn one
    # the fixed prompts are those of the fixed set: adding the drawn ones moves none of them
    assert [p.tokens for p in a[:-2]] == [p.tokens for p in make_prompts(5, 1024, LENGTHS)]
    # a draw that lands on a length the set holds moves to the next free one in its range
    short = SeedDrawn(4, 62)
    hit = short.draw(5)
    assert resolve_lengths(5, (hit, short))[1] == (hit + 1 if hit < 62 else 4)
    with pytest.raises(ValueError, match="lo <= hi"):
        SeedDrawn(10, 5)


def test_device_sets_cross_every_boundary():
    cpu, gpu = default_lengths("cpu"), default_lengths("cuda:0")
    assert cpu == CPU_LENGTHS and gpu == GPU_LENGTHS and default_steps("cuda") > default_steps("cpu")
    assert {1, 2, 3, 63, 64, 65, 127, 128, 129} <= set(cpu)
    assert {15, 16, 17, 2047, 2048, 2049} <= set(gpu) and max(n.lo for n in gpu if isinstance(n, SeedDrawn)) > 2049
    assert any(isinstance(n, SeedDrawn) and n.lo > 17 and int(n) < 63 for n in gpu)  # between the short fixed ones
    for seed in (0, 1, 2):
        fixed = [n for n in gpu if not isinstance(n, SeedDrawn)]
        assert max(resolve_lengths(seed, gpu)) > max(fixed)  # longer than any fixed prompt, whatever the seed
    with pytest.raises(ValueError, match="distinct"):
        make_prompts(0, 1024, (3, 3))

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
    assert len(a[-1].tokens) == long.draw(5) and a[-1].name == f"len{long.draw(5):04d}"
    # the fixed prompts are those of the fixed set: adding the drawn one moves none of them
    assert [p.tokens for p in a[:-1]] == [p.tokens for p in make_prompts(5, 1024, LENGTHS)]
    with pytest.raises(ValueError, match="lo <= hi"):
        SeedDrawn(10, 5)


def test_device_sets_cross_every_boundary():
    cpu, gpu = default_lengths("cpu"), default_lengths("cuda:0")
    assert cpu == CPU_LENGTHS and gpu == GPU_LENGTHS and default_steps("cuda") > default_steps("cpu")
    assert {1, 2, 3, 63, 64, 65, 127, 128, 129} <= set(cpu)
    assert {15, 16, 17, 2047, 2048, 2049} <= set(gpu) and min(n.lo for n in gpu if isinstance(n, SeedDrawn)) > 2049
    for seed in (0, 1, 2):
        fixed = [n for n in gpu if not isinstance(n, SeedDrawn)]
        assert max(resolve_lengths(seed, gpu)) > max(fixed)  # longer than any fixed prompt, whatever the seed
    with pytest.raises(ValueError, match="distinct"):
        make_prompts(0, 1024, (3, 3))

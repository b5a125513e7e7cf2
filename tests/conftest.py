"""Shared fixtures: tiny synthetic checkpoints written once per test session.

``tiny_checkpoint(quant)`` returns the folder of a ``qwen3.6-35b-a3b-tiny`` checkpoint in
format ``quant`` (``"bf16"`` or ``"nvfp4"``, ModelOpt layout), seed ``TINY_SEED``, written
on first use into a session temp dir and reused. Treat the folder as read-only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
import torch

TINY_MODEL = "qwen3.6-35b-a3b-tiny"
TINY_SEED = 1234

# The CPU suite runs tiny shapes, where intra-op threads only add overhead, and on a shared
# 2-core machine OpenMP threads spin against other processes (measured: writing the tiny
# NVFP4 checkpoint took 17.6 s with 2 threads under load, 0.47 s with 1). Override with
# METAINFER_TEST_THREADS. The subprocesses the tests start (the CLI, gates, their engine workers,
# which take the gate's thread count) inherit it through OMP_NUM_THREADS: a timed A/B round of two
# OpenMP threads against another test's process stretched one tiny generate call 14x (median 2.2x),
# enough to lose a round of a 2x-faster candidate; one thread per process stays within 1.2x.
TEST_THREADS = os.environ.get("METAINFER_TEST_THREADS", "1")
os.environ["OMP_NUM_THREADS"] = TEST_THREADS
torch.set_num_threads(int(TEST_THREADS))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A function ``quant -> Path`` of the session's tiny checkpoint in that format (written once)."""
    from metainfer.checkpoint import write_checkpoint
    from metainfer.targets import get_model, get_quant

    cache: dict[str, Path] = {}

    def get(quant: str = "bf16") -> Path:
        if quant not in cache:
            out = tmp_path_factory.mktemp(f"tiny-{quant}")
            cache[quant] = write_checkpoint(get_model(TINY_MODEL), get_quant(quant), out, TINY_SEED, progress=False)
        return cache[quant]

    return get

"""An honest edit for probes (should be accepted; not in the cheat table, whose verdicts must not depend on the
prompt draw): bf16 linear layers take another kernel from 16 rows up, as a CPU GEMM library or a GPU
GEMM heuristic picks its tiling and K-split by M: from 16 rows the product is a split-K GEMM whose two halves are
summed in fp32 and rounded to bf16 once. Exact math in another summation order, so a row computed in a batch of 16 or
more can differ from the same row computed alone where its fp32 sum lands on the other side of a bf16 rounding.

Why it exists: the clean-clone CI of 2026-12-06 refused the honest tiny bf16 engine because ``generate`` (17
prompts decoding together) took a token that was not a top-1 of the engine's teacher-forced row (1.63x the bound),
and on the developers' CPU every product is batch-invariant, so nothing there showed it. This edit makes such an
engine on any machine: the judge must allow a row for the engine's measured batch variation even where the
teacher-forced run of that prompt saw none (``parity_checks.path_noise``, ``batch_noise``). 4 of 27 draws refused
before that allowance, 2 after (``scripts/honest_sweep.py``, docs/results/cpu-2026-12-06-b)."""

from pathlib import Path

from cheats import replace

DESCRIPTION = "bf16 linear as a split-K of two fp32 halves from 16 rows up (an M-dependent kernel choice); rounding only"
OLD_GATE = "-"


def apply(engine_dir: Path) -> None:
    replace(engine_dir, "engine/linear.py", "    return F.linear(x, lin.weight)\n", '''    if x.shape[0] < 16:
        return F.linear(x, lin.weight)
    h = x.shape[1] // 2
    w = lin.weight
    return (F.linear(x[:, :h].float(), w[:, :h].float()) + F.linear(x[:, h:].float(), w[:, h:].float())).to(x.dtype)
''')

"""The HF reference in a worker process of its own, with its results kept in the judge.

``ReferenceCache`` starts one reference worker (``harness.worker``) on first use and memoises
its greedy runs and hidden states by token sequence, so several engines judged on the same
prompts (the mutation suite: 20+ mutants against one reference) pay for the reference once.
It also carries the prompt nonce those runs share (``nonce``): ``run_parity(..., reference=cache)``
draws its prompts from the seed mixed with it, so every engine judged with one cache sees the
same prompts, and no engine can derive them from the seed alone.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import torch

from harness.reference import ReferenceRun
from harness.reference_cached import CachedRows
from harness.worker import Worker, WorkerLimits


def fp32_reference_fits(checkpoint: Path, memory_bytes: float) -> bool:
    """True when the checkpoint's model in float32 takes at most half of ``memory_bytes`` (the parity reference's rule)."""
    from metainfer.checkpoint import CheckpointReader
    from metainfer.targets.models import ModelSpec

    params = ModelSpec("checkpoint", "qwen3_5_moe", CheckpointReader(checkpoint).config).param_count()["total"]
    return 4 * params < memory_bytes / 2


def default_reference_dtype(device: str, checkpoint: Path) -> str:
    """``float32`` unless on CUDA the fp32 model would take over half the GPU's memory, then ``bfloat16``."""
    if torch.device(device).type != "cuda":
        return "float32"
    total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    return "float32" if fp32_reference_fits(checkpoint, total) else "bfloat16"


class ReferenceCache:
    """HF ``Qwen3_5MoeForCausalLM`` of one checkpoint, device and dtype, in a worker; results memoised.

    Args:
        checkpoint: checkpoint folder (validated in the judge first).
        device: where the reference runs (``cpu``, ``cuda``, ``cuda:1``).
        dtype: ``float32`` / ``bfloat16``; None: :func:`default_reference_dtype`.
        nonce: prompt nonce for every parity run using this cache; None draws a secret one.
        limits, isolation: passed to the worker.

    Raises:
        metainfer.errors.CheckpointError: the checkpoint does not validate.
    """

    def __init__(self, checkpoint: str | Path, *, device: str = "cpu", dtype: str | None = None, nonce: int | None = None,
                 limits: WorkerLimits | None = None, isolation: str | None = None) -> None:
        from metainfer.checkpoint import CheckpointReader

        self.checkpoint = Path(checkpoint).resolve()
        reader = CheckpointReader(self.checkpoint)
        reader.validate()
        self.vocab_size: int = int(reader.text_config["vocab_size"])
        self.device = device
        self.dtype = dtype or default_reference_dtype(device, self.checkpoint)
        self.nonce = secrets.randbits(63) if nonce is None else int(nonce)
        self.limits = limits or WorkerLimits()
        self.isolation = isolation
        self._worker: Worker | None = None
        self._loaded = False
        self._load_due = 0.0
        self._runs: dict[tuple, ReferenceRun] = {}
        self._hidden: dict[tuple, torch.Tensor] = {}
        self.worker_starts = 0

    def start(self) -> None:
        """Start the worker and send it ``load`` now: its imports and the model build overlap whatever the judge
        does next (no engine code runs in it, so the gate starts it before the static stage)."""
        if self._worker is None:
            self._worker = Worker("reference", limits=self.limits, isolation=self.isolation)
            self._load_due = self._worker.send("reference.load", timeout=self.limits.start_s + self.limits.load_s,
                                               pipelined=True, checkpoint=str(self.checkpoint), device=self.device,
                                               dtype=self.dtype, threads=torch.get_num_threads())
            self._loaded = False
            self.worker_starts += 1

    def _ready(self) -> Worker:
        self.start()
        assert self._worker is not None
        if not self._loaded:
            self._worker.ready()
            self._worker.receive("reference.load", self._load_due)
            self._loaded = True
        return self._worker

    def run(self, prompt: list[int], n: int, rows: list[int] | None = None) -> ReferenceRun:
        """Greedy continuation of ``n`` tokens and teacher-forced logits float32 [S + n, V] (``Reference.run``;
        ``rows``: the prompt rows to keep, None: all)."""
        key = (tuple(prompt), int(n), None if rows is None else tuple(rows))
        if key not in self._runs:
            out = self._ready().call("reference.run", prompt=list(prompt), n=int(n),
                                     rows=None if rows is None else [int(r) for r in rows])
            self._runs[key] = ReferenceRun(list(prompt), [int(t) for t in out["continuation"]], out["logits"].float(),
                                           None if rows is None else tuple(int(r) for r in rows),
                                           CachedRows.from_wire(out.get("cached")))
        return self._runs[key]

    def hidden(self, tokens: list[int], rows: list[int] | None = None) -> torch.Tensor:
        """Residual stream per layer, float32 [L + 1, T, H] ([L + 1, len(rows), H] with ``rows``;
        ``Reference.hidden_states``)."""
        key = (tuple(tokens), None if rows is None else tuple(rows))
        if key not in self._hidden:
            self._hidden[key] = self._ready().call("reference.hidden", tokens=list(tokens),
                                                   rows=None if rows is None else [int(r) for r in rows]).float()
        return self._hidden[key]

    def local(self, tokens: list[int], hidden: torch.Tensor, rows: list[int] | None = None) -> dict[str, torch.Tensor]:
        """Every reference layer run on the engine's own input to it (``harness.layer_local.local_outputs``):
        ``outputs`` and ``mixers`` float32 [L, T, H] and ``logits`` [T, V] (R rows instead of T with ``rows``). Not memoised:
        ``hidden`` is an engine's."""
        return self._ready().call("reference.local", tokens=list(tokens), hidden=hidden,
                                  rows=None if rows is None else [int(r) for r in rows])

    def close(self) -> None:
        """Stop the worker (results stay; a later miss starts a new one)."""
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def __enter__(self) -> ReferenceCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

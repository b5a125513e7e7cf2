"""Peer engines measured on the same workloads as ours: a registry by name.

``hf``: HF transformers ``Qwen3_5MoeForCausalLM`` with the checkpoint's weights
(``harness.peers.hf``). ``vllm``: vLLM 0.25.1, run as a subprocess from the staged bundle
(``harness.peers.vllm``; CUDA only). ``run_peer`` returns the same summary our engine gets
(``median``, ``spread``, ``samples``, ``unit``) so ``metainfer bench`` can print both.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from harness.workloads import Shapes


class PeerError(RuntimeError):
    """A peer cannot run here (missing CUDA, vLLM not staged, failed run); the message says what to do."""


@dataclass(frozen=True)
class PeerRequest:
    """One peer measurement: ``workload`` on ``checkpoint`` for ``rounds`` samples at ``shapes`` on ``device``, prompts from ``seed``."""

    checkpoint: Path
    workload: str
    rounds: int
    shapes: Shapes
    device: str
    seed: int


#: peer name -> module with ``run(req: PeerRequest) -> dict`` (``median``, ``spread``, ``samples``, ``unit``, ``peer``).
PEERS: dict[str, str] = {"hf": "harness.peers.hf", "vllm": "harness.peers.vllm_runner"}


def preflight(name: str, device: str) -> None:
    """Fail early, before anything is measured, when the peer ``name`` cannot run on ``device``.

    Raises:
        ValueError: unknown peer.
        PeerError: the vllm peer asked for without CUDA.
    """
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; known peers: {', '.join(sorted(PEERS))}")
    if name == "vllm" and device != "cuda":
        raise PeerError("the vllm peer needs CUDA and the staged vLLM bundle (harness/peers/vllm/README.md); run it on the GPU machine with --device cuda")


def run_peer(name: str, req: PeerRequest) -> dict:
    """Measure ``req`` on the peer ``name``.

    Raises:
        ValueError: unknown peer (the message lists the known ones).
        PeerError: the peer cannot run here.
    """
    preflight(name, req.device)
    return importlib.import_module(PEERS[name]).run(req)

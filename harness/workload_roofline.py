"""The roofline figure of every workload, in the workload's own unit (``harness.roofline`` does the byte and FLOP counts).

| timing | roofline | unit |
|---|---|---|
| ``ttft`` (ttft, ttft-2k, ttft-8k) | prefill of P tokens into an empty cache: max(bytes / bandwidth, FLOPs / matrix rate) | ms |
| ``prefill`` (prefill-16k) | P / that prefill time | prompt tok/s |
| ``decode`` (decode-bs1) | 1 / time of one decode step at B = 1, C = P + N/2 | tok/s |
| ``conc`` (conc32, conc64, conc128) | S / time of one decode step at B = S, C = P + N/2 (steady-state decode; the S prefills the measured figure also pays for are left out, so the fraction is a lower bound) | tok/s |

Every workload has a figure; the CPU profile's is nominal (no roofline claim on the CPU).
"""

from __future__ import annotations

from typing import Callable

from harness import roofline
from harness.workloads import Shapes, Workload
from metainfer.targets import GpuProfile, QuantSpec, get_quant


def _ttft(text: dict, q: QuantSpec, gpu: GpuProfile, s: Shapes) -> float:
    return roofline.ttft_ms(text, q, gpu, s.prompt)


def _prefill(text: dict, q: QuantSpec, gpu: GpuProfile, s: Shapes) -> float:
    return s.prompt / roofline.prefill(text, q, s.prompt).seconds(gpu)


def _decode(text: dict, q: QuantSpec, gpu: GpuProfile, s: Shapes) -> float:
    return roofline.decode_tok_s(text, q, gpu, 1, s.prompt + s.output // 2)


def _conc(text: dict, q: QuantSpec, gpu: GpuProfile, s: Shapes) -> float:
    return roofline.decode_tok_s(text, q, gpu, s.streams, s.prompt + s.output // 2)


#: timing name (``harness.workloads.TIMINGS``) -> roofline figure at a shape
ROOFLINES: dict[str, Callable[[dict, QuantSpec, GpuProfile, Shapes], float]] = {
    "ttft": _ttft, "prefill": _prefill, "decode": _decode, "conc": _conc,
}


def roofline_figure(workload: Workload, text: dict, quant: str, gpu: GpuProfile, shapes: Shapes) -> float:
    """The roofline value of ``workload`` at its own shape for the scale of ``shapes`` (``Workload.at``), in its unit.

    Args:
        text: the model's HF ``text_config`` dict; quant: the checkpoint's format name (``metainfer.targets``).

    Raises:
        ValueError: ``shapes`` names no scale of the workload; KeyError: an unknown quant name (from ``get_quant``).
    """
    return ROOFLINES[workload.timing](text, get_quant(quant), gpu, workload.at(shapes))

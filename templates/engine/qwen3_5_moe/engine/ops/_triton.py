"""triton, or stand-ins when it is not installed (a CPU-only install runs the references only).

``from ._triton import HAVE_TRITON, tl, triton``: with triton missing, ``triton.jit`` leaves the
function undecorated (it is never launched) and ``tl`` is None; launching a kernel then fails
with ``RuntimeError`` from ``require_triton``.
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only on installs without triton
    HAVE_TRITON = False
    tl = None

    class _Stub:
        """``triton.jit`` / ``triton.cdiv`` / ``triton.next_power_of_2`` stand-ins."""

        @staticmethod
        def jit(fn=None, **_kw):
            return fn if fn is not None else (lambda f: f)

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)

        @staticmethod
        def next_power_of_2(n: int) -> int:
            return 1 << max(n - 1, 0).bit_length()

    triton = _Stub()


def require_triton(op: str) -> None:
    """Raises RuntimeError when triton is missing and ``op`` was asked to run its kernel."""
    if not HAVE_TRITON:
        raise RuntimeError(f"{op}: the Triton kernel was asked for but triton is not installed; "
                           "install triton (pip install triton) or run the reference (kernels.BACKEND = 'reference')")

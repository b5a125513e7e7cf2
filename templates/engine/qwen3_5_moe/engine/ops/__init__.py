"""The engine's ops, one per file (flash-linear-attention's ``fla/ops/<op>/`` layout, flattened).

Each ``ops/<op>.py`` reads: plain-torch reference (the numerical specification, what CPU runs)
→ Triton kernels → launcher → the public function, which dispatches on ``kernels.BACKEND`` /
``kernels.REFERENCE_OPS`` like the ops in ``kernels/`` (Triton on CUDA, the reference elsewhere),
and the op's launch defaults (its tunables) beside them. Files here import triton through
``_triton`` so a CPU-only install (no triton) can still run every reference.
"""

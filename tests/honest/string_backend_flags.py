"""Sets TF32 through the API torch recommends since 2.9 (``fp32_precision = "tf32"``; ``allow_tf32`` is the
legacy spelling) and picks Inductor's GEMM backends: string-valued flags of torch's own configuration namespaces,
in the engine's own worker (R3, session 4: the static rule admitted a config flag set to a bool/int/float/None
only, so the intent of tests/honest/backend_flags.py written with torch's current API was refused as a monkeypatch).
Strings are now allowed on these precision/backend-choice flags alone, one of their choices
(``harness.static_rules.STRING_FLAGS``); a flag naming a program or path (``cpp.cxx``) still takes none."""

from pathlib import Path

from cheats import append

DESCRIPTION = "torch.backends.*.fp32_precision = 'tf32' and torch._inductor.config.max_autotune_gemm_backends = 'ATEN,TRITON' at import"


def apply(engine_dir: Path) -> None:
    """Append the flags to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
import torch._inductor.config as _inductor_config

torch.backends.cuda.matmul.fp32_precision = "tf32"
torch.backends.cudnn.conv.fp32_precision = "tf32"
_inductor_config.max_autotune_gemm_backends = "ATEN,TRITON"
''')

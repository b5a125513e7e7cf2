"""vLLM 0.25.1 as the peer engine on the H200 machine.

The device machine has no package registry, so vLLM travels as a bundle built here
(``build_bundle.sh``), carried one part per device call (``stage_part.sh``), installed into
``/tmp/site`` (``install.sh``) and run by ``run_vllm.py``, which writes one result JSON
(shape in ``results.py``). ``README.md`` gives the exact device call sequence.

Nothing here imports vLLM at import time; ``RUN_SCRIPT`` is what a benchmark driver runs
in a subprocess with ``PYTHONPATH=/tmp/site``.
"""

from pathlib import Path

VERSION = "0.25.1"
HERE = Path(__file__).resolve().parent
RUN_SCRIPT = HERE / "run_vllm.py"
INSTALL_SCRIPT = HERE / "install.sh"
SITE = Path("/tmp/site")

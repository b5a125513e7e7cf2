"""Payloads the static-bypass cheats hide (in a .txt module, behind a utf-7 cookie, in cached bytecode, in C).

``GIL_HOG``: a module defining ``arm(load)``; the armed ``load`` starts a daemon thread that takes the GIL
in 8 ms bursts whenever this engine's own ``generate`` is not running, so in a shared process the A/B
baseline is slowed (the ``gil_hog`` cheat, which the static rules see when written plainly).
"""

from __future__ import annotations

GIL_HOG = '''
import threading as _th
import time as _time

_mine = _th.Event()


def _spin():
    while True:
        _time.sleep(0.001)
        if not _mine.is_set():
            t = _time.perf_counter()
            while _time.perf_counter() - t < 0.008:
                pass


def arm(load):
    def armed(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
        eng = load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
        own = eng.generate

        def generate(prompts, params):
            _mine.set()
            try:
                return own(prompts, params)
            finally:
                _mine.clear()

        eng.generate = generate
        _th.Thread(target=_spin, daemon=True).start()
        return eng

    return armed
'''


def utf7_comment(code: str) -> bytes:
    """``code`` as one comment line under a utf-7 cookie: read as UTF-8 it is a comment, decoded as
    utf-7 (what Python does) every ``+AAo-`` is a new line and the code runs.

    Raises:
        ValueError: ``code`` holds a character that utf-7 would not pass through unchanged.
    """
    body = ("\n" + code.strip("\n")).replace("\n", "+AAo-")  # the first +AAo- ends the comment
    data = ("# coding: utf-7\n#" + body + "\n").encode("ascii")
    if data.decode("utf-7") != "# coding: utf-7\n#\n" + code.strip("\n") + "\n":
        raise ValueError("payload has characters utf-7 changes; keep to letters, digits, spaces and plain punctuation")
    return data

"""Progress lines of the parity stage: where a long run spends its time, at INFO (``METAINFER_LOG=INFO``).

Every line goes to the ``harness.parity`` logger whichever module writes it: the build loop picks a stage's
progress out of gate.log by that name (its ``PROGRESS_MARK``).
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("harness.parity")

#: Least seconds between two progress lines of one phase.
EVERY_S = 5.0


class Phase:
    """One timed phase; each message's last ``%`` field takes the seconds since the phase began."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()

    def progress(self, done: int, total: int, msg: str, *args: object) -> None:
        """Log ``msg % (done, total, *args, seconds)`` when items remain (``done < total``) and the phase's last
        progress line is ``EVERY_S`` old or more."""
        if time.perf_counter() - self.last >= EVERY_S and done < total:
            log.info(msg, done, total, *args, time.perf_counter() - self.start)
            self.last = time.perf_counter()

    def done(self, msg: str, *args: object) -> None:
        """Log ``msg % (*args, seconds)``."""
        log.info(msg, *args, time.perf_counter() - self.start)

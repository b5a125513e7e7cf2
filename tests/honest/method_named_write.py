"""Names that look like capabilities but are not: a class with methods write/writelines/open, a parameter
named open, a local named exit, a docstring that mentions /proc (issue 10: `write` was refused once)."""

from pathlib import Path

from cheats import append

DESCRIPTION = "a load ledger with .write()/.open() methods, a parameter `open`, a local `exit`"
OLD_GATE = "rejected by static: calls .write() (the false reject of issue 10)"


def apply(engine_dir: Path) -> None:
    """Wrap load() with a ledger that records its calls in memory."""
    append(engine_dir, "engine/__init__.py", '''
class _Ledger:
    """Counts loads in memory (nothing touches /proc or a file)."""

    def __init__(self):
        self.rows = []

    def open(self, mode="w"):
        self.rows.append(("open", mode))
        return self

    def write(self, row):
        self.rows.append(row)

    def writelines(self, rows):
        for row in rows:
            self.write(row)


_LEDGER = _Ledger()
_mw_load = load


def _note(open, what):
    open("w").write(what)


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    exit = max_batch + max_seq_len
    _note(_LEDGER.open, ("load", exit))
    _LEDGER.writelines([("batch", max_batch), ("seq", max_seq_len)])
    return _mw_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
''')

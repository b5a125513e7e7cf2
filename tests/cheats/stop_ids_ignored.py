"""The scheduler ends a request at max_tokens only: its stop ids (and EOS) are not looked at after each token."""

from pathlib import Path

from . import replace

DESCRIPTION = "stop_token_ids and EOS never end a request (it always runs to max_tokens)"
CLASS = "serving"
STAGE = "parity"
REASON = "serving script"


def apply(engine_dir: Path) -> None:
    """The stop test of engine/sequence.py's ``check_stop``."""
    replace(engine_dir, "engine/sequence.py", "if self.out and self.out[-1] in self.stop_ids:", "if False:")

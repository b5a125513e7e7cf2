"""Typed errors of the orchestrator; the CLI prints their message and exits non-zero."""


class MetainferError(Exception):
    """Base of every error metainfer raises on purpose; the message names the problem and the fix."""


class UnknownNameError(MetainferError, KeyError):
    """A registry lookup failed; the message lists the known names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class CheckpointError(MetainferError):
    """A checkpoint folder is missing, malformed, or does not match the expected layout."""


class GpuMismatchError(MetainferError):
    """The requested GPU profile is not the GPU present on this machine."""


#: what a checkpoint folder must hold, for messages
CHECKPOINT_HOLDS = ("an HF-format checkpoint folder holds config.json beside its *.safetensors weights (and the "
                    "tokenizer files for text); `metainfer checkpoint --model M --quant Q --out DIR` writes a synthetic one")


def check_checkpoint_folder(path, flag: str = "--checkpoint") -> None:
    """Refuse a ``--checkpoint`` folder that does not exist, is not a folder, or has no ``config.json``, naming which.

    Raises:
        CheckpointError: the message names the folder, what is wrong with it and what a checkpoint folder holds.
    """
    from pathlib import Path

    p = Path(path)
    what = ("does not exist" if not p.exists() else "is not a folder" if not p.is_dir()
            else "has no config.json" if not (p / "config.json").is_file() else None)
    if what:
        raise CheckpointError(f"{flag} {p} {what}; {CHECKPOINT_HOLDS}")

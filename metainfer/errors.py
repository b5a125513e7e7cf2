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

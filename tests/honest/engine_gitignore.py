"""Adds engine/.gitignore (``__pycache__/`` and an autotuner's scratch folder): a one-line housekeeping file an
agent or a person adds to a package folder as a matter of course (R3, session 4: the file-type allowlist refused any
name without an allowed suffix, ``.gitignore``'s being empty, so the whole candidate was rejected for it). A
``.gitignore`` is now allowed by name: small UTF-8 text that ignores none of the engine's own files."""

from pathlib import Path

DESCRIPTION = "engine/.gitignore holding '__pycache__/' (no code change)"


def apply(engine_dir: Path) -> None:
    """Write the ignore file."""
    (engine_dir / "engine" / ".gitignore").write_text("__pycache__/\n.autotune/\n")

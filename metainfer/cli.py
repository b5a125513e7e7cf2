"""The ``metainfer`` command line.

Each sub-command lives in its own module under ``metainfer/commands/`` and exposes
``register(app)``; this file only discovers them, so commands stay one concern per file.
A ``MetainferError`` is printed as one line and exits with status 2; nothing is lost.
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
import sys

import typer

from metainfer.errors import MetainferError

app = typer.Typer(
    name="metainfer",
    help="Generate a model-specific inference engine with a coding agent, gated by HF parity and measured speed.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    """``--version``: the package version and, in a clone, the commit; then exit."""
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path
    import subprocess

    try:
        v = version("metainfer")
    except PackageNotFoundError:
        v = "unknown (not installed: pip install -e .)"
    here = Path(__file__).resolve().parent
    sha = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True).stdout.strip()
    typer.echo(f"metainfer {v}" + (f" (commit {sha})" if sha else ""))
    raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version (and the commit of a clone) and exit")) -> None:
    """metainfer: targets, checkpoints, engines, parity, benchmarks and the build loop."""


def _register_commands() -> None:
    import metainfer.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        importlib.import_module(f"{pkg.__name__}.{info.name}").register(app)


_register_commands()


def main() -> None:
    """Console entry point: run the app; a ``MetainferError`` becomes a one-line message and exit status 2, Ctrl-C
    exit status 130 without a traceback."""
    if os.environ.get("METAINFER_LOG"):  # progress of long stages (harness.parity at INFO) on stderr
        logging.basicConfig(level=os.environ["METAINFER_LOG"].upper(), format="%(asctime)s %(name)s: %(message)s")
    try:
        app()
    except MetainferError as err:
        typer.secho(f"error: {err}", fg="red", err=True)
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: the command cleaned up on the way out and said what it left
        typer.secho("interrupted", fg="yellow", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()

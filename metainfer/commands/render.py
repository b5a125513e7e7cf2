"""``metainfer render``: turn the engine scaffold into ``generated/<target>/`` for one target; ``--check`` proves
each committed engine under ``generated/`` is its template rendered plus its recorded patches; ``--record``
writes that record (``generated/<target>.lineage/``)."""

from __future__ import annotations

from pathlib import Path

import typer

from metainfer.errors import MetainferError
from metainfer.render import render_engine
from metainfer.targets import make_target


def render(
    model: str = typer.Option(None, "--model", help="registered model name (see `metainfer targets`), or an HF model "
                              "folder or config.json"),
    quant: str = typer.Option(None, "--quant", help="weight format: bf16 or nvfp4"),
    gpu: str = typer.Option(None, "--gpu", help="GPU profile: cpu, h100, h200, b200"),
    out: Path = typer.Option(Path("generated"), "--out", help="parent folder of the per-target engine folders"),
    force: bool = typer.Option(False, "--force", help="replace the target folder if it exists"),
    check: bool = typer.Option(False, "--check", help="check every engine under generated/ against its lineage; exit 1 "
                               "if one differs"),
    record: str = typer.Option(None, "--record", help="write generated/<TARGET>.lineage/ for the committed engine TARGET"),
    template_rev: str = typer.Option("HEAD", "--template-rev", help="with --record: git revision of the template it was "
                                     "rendered from"),
    branch: str = typer.Option(None, "--branch", help="with --record: the target's branch (its commits after --base "
                               "become accepted patches)"),
    base: str = typer.Option(None, "--base", help="with --record: the branch commit that rendered the engine"),
    source: str = typer.Option("", "--source", help="with --record: where the branch can be had (e.g. a bundle path)"),
) -> None:
    """Render templates/engine/<family>/ into <out>/<model>-<quant>-<gpu>/ (jinja2 for *.j2, copies for the rest)."""
    if check or record:
        _lineage(check, record, template_rev, branch, base, source)
        return
    if None in (model, quant, gpu):
        raise typer.BadParameter("--model, --quant and --gpu are required (unless --check or --record)")
    target = make_target(model, quant, gpu)
    try:
        dest = render_engine(target, out, force=force)
    except (FileExistsError, FileNotFoundError) as err:
        raise MetainferError(str(err)) from None
    typer.echo(f"rendered {target.name} -> {dest}")


def _lineage(check: bool, record: str | None, template_rev: str, branch: str | None, base: str | None, source: str) -> None:
    from metainfer.build.config import find_repo_root
    from metainfer.upgrade.lineage import check_lineage, engines, record_lineage

    root = find_repo_root()
    if record:
        m = record_lineage(root, record, template_rev=template_rev, branch=branch, base=base, source=source)
        kinds = ", ".join(f"{p.file} ({p.kind})" for p in m.patches) or "no patches"
        typer.echo(f"recorded generated/{record}.lineage: template tree {m.template_tree[:12]}, {kinds}")
    if not check:
        return
    bad = 0
    for t in engines(root):
        r = check_lineage(root, t)
        typer.echo(f"{'ok  ' if r.ok else 'FAIL'} generated/{t}" + ("" if r.ok else f": {r.error}"))
        for n in r.notes:
            typer.echo(f"     note: {n}")
        bad += not r.ok
    if bad:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``render`` to the app."""
    app.command("render")(render)

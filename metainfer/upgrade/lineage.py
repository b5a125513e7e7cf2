"""Lineage of an engine committed under ``generated/``: the template it was rendered from plus recorded patches.

``generated/<target>.lineage/manifest.json`` (schema 1) names the template as a git tree id (so
an older template is exported from the repository's own history, on any full clone) and the
patches, in order, beside it (``NNN-<slug>.patch``, repository-relative paths): the accepted
iterations of the target's branch (``kind: accepted``) and any difference the branch does not
explain (``kind: drift``), each with the commit and summary it came from. ``check_lineage``
renders the template tree for the target, applies the patches and compares the result with
the committed engine byte for byte; ``record_lineage`` writes the manifest for an engine.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from metainfer.errors import MetainferError
from metainfer.render import render_engine, template_digest
from metainfer.targets import Target, make_target

SCHEMA = 1
_SKIP = {"__pycache__", ".pytest_cache"}


class LineageError(MetainferError):
    """A lineage cannot be read, rendered or recorded (missing manifest, unknown tree, patch that does not apply)."""


@dataclass(frozen=True)
class LineagePatch:
    """One recorded patch: ``file`` beside the manifest, ``kind`` (``accepted`` / ``drift``), its source ``commit``
    (None for drift) and one-line ``summary``."""

    file: str
    kind: str
    summary: str
    commit: str | None = None


@dataclass
class Manifest:
    """``generated/<target>.lineage/manifest.json``.

    Attributes:
        target: ``<model>-<quant>-<gpu>``.
        model_source, quant, gpu: what ``make_target`` needs to render it again.
        family: template family folder.
        template_tree: git tree id of ``templates/engine/<family>`` at render time.
        template_digest: ``metainfer.render.template_digest`` of that tree (a check of the export).
        branch: the target's branch name and the head the patches were taken from (may be absent here).
        source: where that branch can be had (e.g. a git bundle under ``runs/``), free text.
        patches: in application order.
        engine_digest: digest of the committed engine folder when recorded.
    """

    target: str
    model_source: str
    quant: str
    gpu: str
    family: str
    template_tree: str
    template_digest: str
    branch: dict = field(default_factory=dict)
    source: str = ""
    patches: list[LineagePatch] = field(default_factory=list)
    engine_digest: str = ""

    def to_json(self) -> dict:
        """Plain dict for ``manifest.json``."""
        d = dict(self.__dict__)
        d["patches"] = [p.__dict__ for p in self.patches]
        return {"schema": SCHEMA, **d}

    @classmethod
    def read(cls, folder: Path) -> "Manifest":
        """Read ``folder/manifest.json``.

        Raises:
            LineageError: missing, unreadable or of another schema.
        """
        f = folder / "manifest.json"
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError) as err:
            raise LineageError(f"cannot read {f}: {err}; record it with `metainfer render --record <target>`") from None
        if d.pop("schema", None) != SCHEMA:
            raise LineageError(f"{f}: schema is not {SCHEMA}")
        d["patches"] = [LineagePatch(**p) for p in d.get("patches", [])]
        return cls(**d)


@dataclass
class CheckResult:
    """The outcome of checking one engine: ``ok``, the files that differ, and notes (staleness)."""

    target: str
    ok: bool
    differ: list[str] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def lineage_dir(root: Path, target: str) -> Path:
    """``<root>/generated/<target>.lineage``."""
    return root / "generated" / f"{target}.lineage"


def engines(root: Path) -> list[str]:
    """Target names of the engines committed under ``generated/`` (folders holding ``engine/__init__.py``)."""
    gen = root / "generated"
    return sorted(p.name for p in gen.iterdir() if (p / "engine" / "__init__.py").is_file()) if gen.is_dir() else []


def tree_files(folder: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file under ``folder`` (caches left out)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not _SKIP.intersection(p.relative_to(folder).parts) and p.suffix != ".pyc"}


def folder_digest(folder: Path) -> str:
    """sha256 (16 hex) over ``tree_files(folder)``."""
    h = hashlib.sha256()
    for rel, data in tree_files(folder).items():
        h.update(rel.encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def _git(root: Path, *args: str, binary: bool = False, cwd: Path | None = None) -> str | bytes:
    p = subprocess.run(["git", *args], cwd=cwd or root, capture_output=True, text=not binary)
    if p.returncode != 0:
        err = p.stderr if not binary else p.stderr.decode(errors="replace")
        raise LineageError(f"git {' '.join(args[:3])} failed: {err.strip()[:500]}")
    return p.stdout


def export_tree(root: Path, tree: str, family: str, dest: Path) -> Path:
    """Export the git tree ``tree`` (a ``templates/engine/<family>`` tree) to ``dest/<family>``; return ``dest``.

    Raises:
        LineageError: the tree is not in this clone (a shallow clone: ``git fetch --unshallow``).
    """
    out = dest / family
    out.mkdir(parents=True, exist_ok=True)
    try:
        data = _git(root, "archive", "--format=tar", tree, binary=True)
    except LineageError as err:
        raise LineageError(f"template tree {tree[:12]} is not in this clone ({err}); fetch the full history "
                           "(`git fetch --unshallow`)") from None
    subprocess.run(["tar", "-x", "-C", str(out)], input=data, check=True)
    return dest


def render_base(root: Path, m: Manifest, out_root: Path) -> Path:
    """Render the manifest's template tree for its target into ``out_root/generated/<target>``."""
    with tempfile.TemporaryDirectory(prefix="metainfer-tpl-") as tmp:
        templates = export_tree(root, m.template_tree, m.family, Path(tmp))
        got = template_digest(templates / m.family)
        if got != m.template_digest:
            raise LineageError(f"template tree {m.template_tree[:12]} exports with digest {got}, the manifest says "
                               f"{m.template_digest}; the manifest is inconsistent: record it again")
        return render_engine(_target(m), out_root / "generated", templates=templates)


def _target(m: Manifest) -> Target:
    return make_target(m.model_source, m.quant, m.gpu)


def apply_patch(work: Path, patch: Path) -> None:
    """``git apply`` one repository-relative patch inside ``work`` (a plain folder, not a repository).

    Raises:
        LineageError: the patch does not apply (git's message included).
    """
    p = subprocess.run(["git", "apply", "--whitespace=nowarn", "--unsafe-paths", str(patch)], cwd=work,
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise LineageError(f"{patch.name} does not apply: {p.stderr.strip()[:800]}")


def rebuild(root: Path, m: Manifest, folder: Path, out_root: Path) -> Path:
    """Render the base and apply every recorded patch; return ``out_root/generated/<target>``."""
    dest = render_base(root, m, out_root)
    for p in m.patches:
        apply_patch(out_root, folder / p.file)
    return dest


def check_lineage(root: Path, target: str) -> CheckResult:
    """Prove ``generated/<target>`` equals its template (at the recorded tree) rendered for it plus its recorded patches.

    Also notes (without failing) when today's template differs from the recorded tree, i.e. the
    engine does not carry template changes made since it was rendered.
    """
    folder = lineage_dir(root, target)
    try:
        m = Manifest.read(folder)
        with tempfile.TemporaryDirectory(prefix="metainfer-check-") as tmp:
            built = rebuild(root, m, folder, Path(tmp))
            want, have = tree_files(built), tree_files(root / "generated" / target)
    except LineageError as err:
        return CheckResult(target, False, error=str(err))
    differ = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    res = CheckResult(target, not differ, differ)
    if differ:
        res.error = (f"generated/{target} differs from its template (tree {m.template_tree[:12]}) rendered for it plus "
                     f"{len(m.patches)} recorded patch(es) in {len(differ)} file(s): {', '.join(differ[:8])}"
                     f"{' …' if len(differ) > 8 else ''}. Commit engine changes through the branch (metainfer build/step) "
                     f"and record them: `metainfer render --record {target}`")
    current = template_digest(root / "templates" / "engine" / m.family)
    if current != m.template_digest:
        res.notes.append(f"templates/engine/{m.family} changed since {target} was rendered (digest {m.template_digest} "
                         f"-> {current}): the engine does not carry those template changes; bring it up to date with "
                         f"`metainfer upgrade --target {target} --to {m.model_source}`")
    return res


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48] or "patch"


def record_lineage(root: Path, target: str, *, template_rev: str = "HEAD", branch: str | None = None,
                   base: str | None = None, source: str = "") -> Manifest:
    """Write ``generated/<target>.lineage/`` for the committed engine ``generated/<target>``.

    The base is ``templates/engine/<family>`` at git revision ``template_rev``. With ``branch``
    (and ``base``, the branch commit holding the rendered engine), every later commit of the branch
    touching the engine becomes an ``accepted`` patch. Whatever the committed engine still differs
    by becomes one ``drift`` patch, stated as such: nothing is left unexplained.

    Raises:
        LineageError: no such engine, unknown revision, or a branch commit that does not apply.
    """
    engine = root / "generated" / target
    if not (engine / "engine" / "__init__.py").is_file():
        raise LineageError(f"no engine at {engine}")
    t = make_target(*_split(root, target))
    tree = _template_tree(root, template_rev, t.model.family)
    folder = lineage_dir(root, target)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="metainfer-tpl-") as tmp:
        tdig = template_digest(export_tree(root, tree, t.model.family, Path(tmp) / "t") / t.model.family)
    m = Manifest(target, t.model.source, t.quant.name, t.gpu.name, t.model.family, tree, tdig,
                 branch={"name": branch, "base": base} if branch else {}, source=source)
    if branch and base:
        shas = str(_git(root, "rev-list", "--reverse", f"{base}..{branch}", "--", f"generated/{target}")).split()
        for k, sha in enumerate(shas, 1):
            summary = str(_git(root, "log", "-1", "--format=%s", sha)).strip()
            name = f"{k:03d}-{_slug(summary)}.patch"
            (folder / name).write_text(str(_git(root, "show", "--binary", "--format=", sha, "--", f"generated/{target}")))
            m.patches.append(LineagePatch(name, "accepted", summary, sha))
        m.branch["head"] = str(_git(root, "rev-parse", branch)).strip()
    with tempfile.TemporaryDirectory(prefix="metainfer-rec-") as tmp:
        built = rebuild(root, m, folder, Path(tmp))
        drift = _diff_folders(built, engine, f"generated/{target}")
    if drift:
        name = f"{len(m.patches) + 1:03d}-drift.patch"
        (folder / name).write_text(drift)
        m.patches.append(LineagePatch(name, "drift", "the committed engine differs from the template render plus the "
                                      "branch's accepted iterations by this patch"))
    m.engine_digest = folder_digest(engine)
    (folder / "manifest.json").write_text(json.dumps(m.to_json(), indent=2) + "\n")
    return m


def _template_tree(root: Path, rev: str, family: str) -> str:
    """The tree id of ``templates/engine/<family>`` at commit-ish ``rev``, or ``rev`` itself when it is that tree."""
    try:
        return str(_git(root, "rev-parse", f"{rev}:templates/engine/{family}")).strip()
    except LineageError:
        if str(_git(root, "cat-file", "-t", rev)).strip() == "tree":
            return str(_git(root, "rev-parse", rev)).strip()
        raise


def _split(root: Path, target: str) -> tuple[str, str, str]:
    """(model source, quant, gpu) of a committed engine: its ``rendered_for.json`` if any, else the name."""
    rec = root / "generated" / target / "engine" / "rendered_for.json"
    if rec.is_file():
        d = json.loads(rec.read_text())
        return d["model_source"], d["quant"], d["gpu"]
    from metainfer.targets import parse_target

    t = parse_target(target)
    return t.model.name, t.quant.name, t.gpu.name


def _diff_folders(a: Path, b: Path, rel: str) -> str:
    """``git diff --no-index`` of two folders, rewritten to repository-relative ``rel/`` paths ('' when equal)."""
    with tempfile.TemporaryDirectory(prefix="metainfer-diff-") as tmp:
        for name, src in (("a", a), ("b", b)):
            shutil.copytree(src, Path(tmp) / name / rel, ignore=shutil.ignore_patterns(*_SKIP, "*.pyc"))
        p = subprocess.run(["git", "diff", "--no-index", "--binary", "--no-prefix", f"a/{rel}", f"b/{rel}"], cwd=tmp,
                           capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise LineageError(f"git diff --no-index failed: {p.stderr.strip()[:500]}")
    return p.stdout  # --no-prefix keeps "a/<rel>/..." and "b/<rel>/...": git apply's -p1 strips a/ and b/

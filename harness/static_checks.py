"""The gate's static stage: layout, source rules, size, tunables, and an audited import.

Runs before anything is timed or compared (KernelBench order: compile -> correct -> time).
Every finding names the file and line (``harness.static_ast.Finding``). The checks:

1. layout: ``engine/__init__.py`` exists and defines or imports ``load`` and ``SamplingParams``;
2. everything Python could load is UTF-8 ``.py`` source inside ``engine/`` (``harness.static_files``:
   no bytecode, extension modules, ``.pth`` files, coding cookies, links); every ``.py`` compiles and
   obeys the AST rules of ``harness.static_ast`` (forbidden imports and calls, file writes, paths out
   of the folder, monkeypatching);
3. size: only source-like files (``ALLOWED_SUFFIXES``, and a small ``.gitignore`` that ignores none of the
   engine's files), each at most ``max_file_bytes``, all
   together at most ``max_total_bytes`` and ``max_files`` (no cached tensors or binaries);
4. ``engine/tunables.json`` parses as ``{"values", "space"}`` with every value in its space;
5. only when 1-4 pass: the engine is imported under an audit hook
   (``harness.import_probe``): no file read outside the engine folder and the checkpoint, no
   write, process or socket at module level.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.static_ast import Finding, check_source
from harness.static_files import check_files

ALLOWED_SUFFIXES = {".py", ".json", ".md", ".txt", ".cu", ".cuh", ".cpp", ".h", ".c", ".toml", ".cfg", ".yaml", ".yml"}
#: Files allowed by their whole name (no source suffix): small UTF-8 text, checked by ``_check_gitignore``.
ALLOWED_NAMES = {".gitignore"}
GITIGNORE_MAX_BYTES = 8 * 1024
_SKIP_DIRS = {".git"}


@dataclass(frozen=True)
class StaticLimits:
    """Size limits of an engine folder (bytes and file count): generous for source, far too small for a cached tensor of the real model."""

    max_file_bytes: int = 256 * 1024
    max_total_bytes: int = 4 * 1024 * 1024
    max_files: int = 400


@dataclass
class StaticResult:
    """Outcome of the static stage: ``ok`` when there is no finding; ``findings`` each name file, line, rule."""

    ok: bool
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    total_bytes: int = 0
    imported: bool = False

    def to_dict(self) -> dict:
        """JSON-able form for the gate's ``stages[].detail``."""
        return {"files": self.files, "total_bytes": self.total_bytes, "imported": self.imported,
                "findings": [f.__dict__ | {"text": str(f)} for f in self.findings]}

    @property
    def error(self) -> str | None:
        """One line for the gate's ``stages[].error``: the first findings, or None when green."""
        if self.ok:
            return None
        head = "; ".join(str(f) for f in self.findings[:3])
        more = f" (+{len(self.findings) - 3} more)" if len(self.findings) > 3 else ""
        return head + more


def _entries(engine_dir: Path) -> list[Path]:
    """Every file, folder and link under ``engine_dir`` (links not followed), ``.git`` excepted, sorted."""
    return sorted(p for p in engine_dir.rglob("*") if not _SKIP_DIRS.intersection(p.relative_to(engine_dir).parts))


def _check_layout(engine_dir: Path) -> list[Finding]:
    init = engine_dir / "engine" / "__init__.py"
    if not init.is_file():
        return [Finding("engine/__init__.py", None, "layout", "missing: the engine package must be <engine_dir>/engine/__init__.py")]
    try:
        tree = ast.parse(init.read_text())
    except SyntaxError:
        return []  # reported by the syntax rule
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return [Finding("engine/__init__.py", None, "layout", f"defines no public `{n}` (docs/CONTRACTS.md, 'The engine')")
            for n in ("load", "SamplingParams") if n not in names]


def _check_no_repository(engine_dir: Path) -> list[Finding]:
    """A ``.git`` anywhere in the engine folder (its contents are not checked): git run on the folder (the gate
    records the engine's commit) would take that repository's config, whose commands (``core.fsmonitor``, diff and
    filter drivers) run with the caller's rights, outside every worker."""
    return [Finding(p.relative_to(engine_dir).as_posix(), None, "layout",
                    "a git repository inside the engine folder: its config runs commands wherever git is used on the folder; "
                    "the engine folder holds source only (the build's worktree is the repository)")
            for p in sorted(engine_dir.rglob(".git"))]


def _check_gitignore(engine_dir: Path, path: Path, files: list[Path]) -> list[Finding]:
    """A ``.gitignore`` is housekeeping: small UTF-8 text that ignores none of the engine's files. The build commits
    its worktree with ``git add -A``, so an ignored file would be judged by the gate and missing from the commit that
    records the accepted engine. Patterns are matched broadly (``fnmatch``, ``*`` crossing ``/``; ``!`` lines skipped):
    a pattern that might hide a shipped file is refused."""
    import fnmatch

    rel = path.relative_to(engine_dir).as_posix()
    data = path.read_bytes()
    if len(data) > GITIGNORE_MAX_BYTES:
        return [Finding(rel, None, "size", f"{len(data)} bytes > limit {GITIGNORE_MAX_BYTES} for a .gitignore")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        return [Finding(rel, None, "size", "a .gitignore is UTF-8 text")]
    here = path.parent
    shipped = [f.relative_to(here).as_posix() for f in files if here in f.parents]
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        pat = line.strip()
        if not pat or pat.startswith(("#", "!")):
            continue
        pat = pat.rstrip("/")
        anchored = "/" in pat
        pat = pat.lstrip("/")
        for f in shipped:
            parts = f.split("/")
            prefixes = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
            hit = any(fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p, "*/" + pat) for p in prefixes) if anchored \
                else any(fnmatch.fnmatchcase(part, pat) for part in parts)
            if hit:
                out.append(Finding(rel, i, "gitignore", f"{line.strip()!r} ignores {f}, a file of the engine: the build's commit "
                                   "would not hold what the gate judged; ignore only what the engine does not ship"))
                break
    return out


def _check_tunables(engine_dir: Path) -> list[Finding]:
    rel = "engine/tunables.json"
    path = engine_dir / rel
    if not path.is_file():
        return [Finding(rel, None, "tunables", "missing: every engine carries engine/tunables.json (may be empty maps)")]
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        return [Finding(rel, err.lineno, "tunables", f"not valid JSON: {err.msg}")]
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict) or not isinstance(data.get("space"), dict):
        return [Finding(rel, None, "tunables", 'must be {"values": {name: value}, "space": {name: [choices]}}')]
    out = []
    values, space = data["values"], data["space"]
    for name in sorted(set(values) | set(space)):
        if name not in space:
            out.append(Finding(rel, None, "tunables", f"{name!r} has a value but no declared space"))
        elif name not in values:
            out.append(Finding(rel, None, "tunables", f"{name!r} has a space but no value"))
        elif not isinstance(space[name], list) or not space[name]:
            out.append(Finding(rel, None, "tunables", f"space of {name!r} must be a non-empty list of choices"))
        elif values[name] not in space[name] or type(values[name]) not in {type(c) for c in space[name]}:
            out.append(Finding(rel, None, "tunables", f"{name}={values[name]!r} is not one of its choices {space[name]}"))
    return out


def run_static(engine_dir: str | Path, checkpoint_dir: str | Path | None = None, *,
               limits: StaticLimits = StaticLimits(), import_check: bool = True) -> StaticResult:
    """Run the static stage on the engine folder ``engine_dir`` (``generated/<target>``).

    Args:
        engine_dir: folder holding the ``engine`` package.
        checkpoint_dir: the checkpoint the gate will load; the only outside folder the
            engine may read at import.
        limits: size limits.
        import_check: also import the engine under the audit hook (after every other check passed).

    Raises:
        FileNotFoundError: ``engine_dir`` is not a folder (a usage error, not a red stage).
    """
    engine_dir = Path(engine_dir).resolve()
    if not engine_dir.is_dir():
        raise FileNotFoundError(f"engine folder {engine_dir} does not exist; pass --engine generated/<target>")
    entries = _entries(engine_dir)
    files = [p for p in entries if p.is_file() and not p.is_symlink()]
    res = StaticResult(ok=False, files=len(files))
    res.findings += _check_layout(engine_dir)
    res.findings += _check_no_repository(engine_dir)
    res.findings += check_files(engine_dir, entries)
    flagged = {f.file for f in res.findings}
    for p in files:
        rel = p.relative_to(engine_dir).as_posix()
        size = p.stat().st_size
        res.total_bytes += size
        if rel in flagged:
            continue  # bytecode, native code, a bad encoding: said once already
        if p.name in ALLOWED_NAMES:
            res.findings += _check_gitignore(engine_dir, p, files)
        elif p.suffix not in ALLOWED_SUFFIXES:
            res.findings.append(Finding(rel, None, "size", f"file type {p.suffix or '(none)'} not allowed in an engine (source only: {', '.join(sorted(ALLOWED_SUFFIXES))})"))
        elif size > limits.max_file_bytes:
            res.findings.append(Finding(rel, None, "size", f"{size} bytes > limit {limits.max_file_bytes}: engine files are source, not data"))
        if p.suffix == ".py":
            res.findings += check_source(p.read_bytes().decode("utf-8-sig"), rel, depth=len(Path(rel).parts))
    if res.total_bytes > limits.max_total_bytes or len(files) > limits.max_files:
        res.findings.append(Finding(".", None, "size", f"{len(files)} files, {res.total_bytes} bytes > limits {limits.max_files} files, {limits.max_total_bytes} bytes"))
    res.findings += _check_tunables(engine_dir)
    if not res.findings and import_check:
        from harness.import_probe import probe_import

        res.findings += probe_import(engine_dir, checkpoint_dir)
        res.imported = True
    res.ok = not res.findings
    return res

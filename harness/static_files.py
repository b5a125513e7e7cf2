"""File-level rules of the static stage: everything Python could load must be UTF-8 ``.py`` source.

The AST rules read each ``.py`` file as UTF-8 text; Python would run something else if the
folder held cached bytecode (a ``.pyc`` beside untouched source is loaded instead of it), a
native extension module, a ``.pth`` file, or a source file whose ``coding`` cookie makes the
interpreter decode it differently (``# coding: utf-7`` turns ``+AAo-`` into a new line). Rules:

- ``bytecode``: a ``__pycache__`` folder, or a ``.pyc``/``.pyo`` file, or any file starting with
  Python's bytecode magic number;
- ``extension-module``: ``.so``/``.pyd``/``.dll``/``.dylib`` or a file with ELF, PE or Mach-O magic;
- ``pth``: a ``.pth`` file;
- ``encoding``: a ``.py`` file that is not strict UTF-8, or declares a coding other than utf-8;
- ``script``: any file starting with ``#!`` whatever its name (``cc.txt``, ``x.py``): a program the kernel runs when
  something names it (``CXX=engine/cc.txt``); an engine ships source that Python or a compiler reads, never a script;
- ``symlink``: a link (it could point anywhere);
- ``layout``: a ``.py`` file outside the ``engine/`` package (a folder on ``sys.path`` would let it
  shadow ``torch`` or the judge).
"""

from __future__ import annotations

import codecs
import importlib.util
import re
from pathlib import Path

from harness.static_ast import Finding

BYTECODE_SUFFIXES = {".pyc", ".pyo"}
EXTENSION_SUFFIXES = {".so", ".pyd", ".dll", ".dylib"}
_NATIVE_MAGIC = (b"\x7fELF", b"MZ", b"\xfe\xed\xfa\xce", b"\xfe\xed\xfa\xcf", b"\xce\xfa\xed\xfe", b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _magic(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(16)
    except OSError:
        return b""


def _kind(path: Path, rel: str) -> Finding | None:
    """The one file-type finding of a regular file, or None."""
    suffixes = [s.lower() for s in path.suffixes]
    head = _magic(path)
    if path.suffix.lower() in BYTECODE_SUFFIXES or head[:4] == importlib.util.MAGIC_NUMBER:
        return Finding(rel, None, "bytecode", "compiled bytecode: Python would run it instead of the source the checks read; ship .py source only")
    if any(s in EXTENSION_SUFFIXES for s in suffixes) or head.startswith(_NATIVE_MAGIC):
        return Finding(rel, None, "extension-module", "native code (an extension module or library) is not source the checks can read")
    if path.suffix.lower() == ".pth":
        return Finding(rel, None, "pth", ".pth files run code when a folder is added to the path; remove it")
    return None


def check_encoding(data: bytes, rel: str) -> list[Finding]:
    """Findings for a ``.py`` file's bytes: strict UTF-8 (a BOM allowed) and no coding cookie but utf-8.

    PEP 263: the cookie counts on line 1 or 2 (line 2 only when line 1 is a comment or blank).
    """
    out = []
    lines = data.split(b"\n", 2)[:2]
    for i, line in enumerate(lines):
        m = _COOKIE.match(line)
        if m:
            try:
                name = codecs.lookup(m.group(1).decode("ascii", "replace")).name
            except LookupError:
                name = m.group(1).decode("ascii", "replace")
            if name != "utf-8":
                out.append(Finding(rel, i + 1, "encoding", f"declares coding {m.group(1).decode('ascii', 'replace')!r}: Python would "
                                   "decode the file differently from the checks; engine source is UTF-8 (drop the cookie)"))
            break
        if i == 0 and line.strip() and not line.lstrip().startswith(b"#"):
            break
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        out.append(Finding(rel, line, "encoding", f"not UTF-8 ({err.reason} at byte {err.start}); engine source is UTF-8"))
    return out


def check_files(engine_dir: Path, entries: list[Path]) -> list[Finding]:
    """File-level findings for every entry (files, folders, links) under ``engine_dir``."""
    out: list[Finding] = []
    for p in entries:
        rel = p.relative_to(engine_dir).as_posix()
        if p.is_symlink():
            out.append(Finding(rel, None, "symlink", "a symbolic link could point anywhere; copy the file in instead"))
        elif p.is_dir():
            if p.name == "__pycache__":
                out.append(Finding(rel, None, "bytecode", "cached bytecode folder: Python would run it instead of the source the checks read; delete it"))
        elif (f := _kind(p, rel)) is not None:
            out.append(f)
        else:
            if _magic(p).startswith(b"#!"):
                out.append(Finding(rel, 1, "script", "starts with '#!': a script the system runs when a library is pointed at it "
                                   "(a compiler or tool named by a path); an engine ships no scripts, drop the '#!' line"))
            if p.suffix == ".py":
                if not rel.startswith("engine/"):
                    out.append(Finding(rel, None, "layout", "Python source outside engine/: an engine's code lives in its engine package"))
                out += check_encoding(p.read_bytes(), rel)
    return out

"""The tools an LLM agent gets: list, read, write and edit files of the engine, run parity, run a quick bench.

Every path is relative to the engine folder (``ctx.engine_dir``) and must stay inside it:
absolute paths, ``..`` components and symlinks that lead out are refused. A refused or
failed call raises ``ToolError``; the agent loop sends its message back to the model as a
``tool_result`` with ``is_error`` and the conversation goes on. Tool specs are in the
Anthropic Messages API ``tools`` format (name, description, JSON-schema ``input_schema``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

#: a file listed or read may be at most this large (bytes); the engine has no business holding larger text
MAX_READ_BYTES = 400_000
#: characters of a tool result sent back to the model
MAX_RESULT_CHARS = 40_000
_SKIP = {"__pycache__", ".pytest_cache"}


class ToolError(Exception):
    """A tool call was refused or failed; the message is sent back to the model (``is_error``)."""


def resolve_inside(root: Path, rel: str) -> Path:
    """Resolve ``rel`` (a path relative to ``root``) and check it stays inside ``root``.

    Raises:
        ToolError: ``rel`` is empty, absolute, has a ``..`` component, or resolves (through a
            symlink) to a place outside ``root``.
    """
    if not isinstance(rel, str) or not rel.strip():
        raise ToolError("path must be a non-empty string relative to the engine folder, e.g. 'engine/tunables.json'")
    p = Path(rel)
    if p.is_absolute() or rel.startswith("~"):
        raise ToolError(f"path {rel!r} is absolute; give it relative to the engine folder")
    if ".." in p.parts:
        raise ToolError(f"path {rel!r} contains '..'; only files inside the engine folder may be used")
    root_real = Path(os.path.realpath(root))
    target = Path(os.path.realpath(root_real / p))
    if target != root_real and root_real not in target.parents:
        raise ToolError(f"path {rel!r} leads outside the engine folder (through a symlink); refused")
    return target


def list_files(root: Path, path: str = ".") -> str:
    """One line per file under ``root/path``: relative path and size in bytes (caches skipped)."""
    base = resolve_inside(root, path) if path not in ("", ".") else Path(os.path.realpath(root))
    if not base.exists():
        raise ToolError(f"{path!r} does not exist in the engine folder; call list_files with path '.' to see what does")
    files = [base] if base.is_file() else sorted(f for f in base.rglob("*") if f.is_file() and not _SKIP.intersection(f.parts))
    real_root = Path(os.path.realpath(root))
    return "\n".join(f"{f.relative_to(real_root).as_posix()}\t{f.stat().st_size}" for f in files) or "(empty)"


def read_file(root: Path, path: str, offset: int = 0, limit: int = MAX_RESULT_CHARS) -> str:
    """The text of ``path`` from character ``offset``, at most ``limit`` characters, with a note when cut.

    Raises:
        ToolError: missing file, a folder, a binary or oversized file.
    """
    f = resolve_inside(root, path)
    if not f.is_file():
        raise ToolError(f"{path!r} is not a file in the engine folder; call list_files to see the files")
    if f.stat().st_size > MAX_READ_BYTES:
        raise ToolError(f"{path!r} has {f.stat().st_size} bytes, more than the {MAX_READ_BYTES} a read allows")
    try:
        text = f.read_text()
    except UnicodeDecodeError:
        raise ToolError(f"{path!r} is not UTF-8 text") from None
    part = text[offset : offset + limit]
    if offset + limit < len(text):
        part += f"\n[... cut at character {offset + limit} of {len(text)}; read again with offset={offset + limit}]"
    return part


def write_file(root: Path, path: str, content: str) -> str:
    """Create or replace ``path`` with ``content`` (folders made as needed); returns a one-line receipt."""
    f = resolve_inside(root, path)
    if f.is_dir():
        raise ToolError(f"{path!r} is a folder; give a file path")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(content)
    return f"wrote {path} ({len(content)} characters)"


def edit_file(root: Path, path: str, old: str, new: str) -> str:
    """Replace the one exact occurrence of ``old`` in ``path`` by ``new``.

    Raises:
        ToolError: ``old`` is empty, absent, or occurs more than once (quote more context).
    """
    f = resolve_inside(root, path)
    if not f.is_file():
        raise ToolError(f"{path!r} is not a file in the engine folder")
    if not old:
        raise ToolError("old must be a non-empty exact excerpt of the file")
    text = f.read_text()
    n = text.count(old)
    if n == 0:
        raise ToolError(f"old text not found in {path}; read the file and quote it exactly (whitespace included)")
    if n > 1:
        raise ToolError(f"old text occurs {n} times in {path}; quote more surrounding lines so it is unique")
    f.write_text(text.replace(old, new, 1))
    return f"edited {path}: replaced {len(old)} characters by {len(new)}"


def _spec(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"name": name, "description": description,
            "input_schema": {"type": "object", "properties": props, "required": required, "additionalProperties": False}}


_S, _I = {"type": "string"}, {"type": "integer"}
FILE_TOOL_SPECS: list[dict[str, Any]] = [
    _spec("list_files", "List the files of the engine folder (or a sub-folder) with their sizes in bytes.",
          {"path": {**_S, "description": "folder relative to the engine folder; '.' for all"}}, []),
    _spec("read_file", "Read a text file of the engine folder.",
          {"path": _S, "offset": {**_I, "description": "first character, default 0"}}, ["path"]),
    _spec("write_file", "Create or overwrite a file of the engine folder with the given content.",
          {"path": _S, "content": _S}, ["path", "content"]),
    _spec("edit_file", "Replace one exact, unique occurrence of `old` by `new` in a file of the engine folder.",
          {"path": _S, "old": _S, "new": _S}, ["path", "old", "new"]),
]
GATE_TOOL_SPECS: list[dict[str, Any]] = [
    _spec("run_parity", "Run the harness's static and parity stages on the engine as it is now; returns pass/fail, "
          "the worst relative error and the first bad layer. Takes minutes; use it before you finish.", {}, []),
    _spec("run_quick_bench", "Run static, parity and a short A/B benchmark of the engine now against the last accepted "
          "engine; returns speedup, noise and roofline fraction per workload.", {}, []),
]
LOOP_TOOL_SPECS: list[dict[str, Any]] = [
    _spec("propose", "State this iteration's single hypothesis and the gain you expect, BEFORE any edit. "
          "Edits are refused until this is called.",
          {"hypothesis": {**_S, "description": "what is slow and why, and the one change that addresses it"},
           "expected_gain": {**_S, "description": "the figure you predict, e.g. 'decode-bs1 +15% (fewer launches)'"}},
          ["hypothesis", "expected_gain"]),
    _spec("finish", "End this iteration. The harness then gates the engine as you left it.",
          {"summary": {**_S, "description": "one line: the change and its hypothesis"}}, ["summary"]),
]
_PY_TYPES = {"string": str, "integer": int, "object": dict, "boolean": bool, "number": (int, float)}


def check_input(spec: dict[str, Any], args: Any) -> dict[str, Any]:
    """Check a tool call's ``input`` against the tool's schema (object, required keys, no extra keys, types).

    Raises:
        ToolError: naming every problem, so the model can fix the call.
    """
    schema = spec["input_schema"]
    if not isinstance(args, dict):
        raise ToolError(f"{spec['name']}: input must be a JSON object, got {type(args).__name__}")
    props = schema["properties"]
    problems = [f"missing required field {k!r}" for k in schema["required"] if k not in args]
    problems += [f"unknown field {k!r} (fields: {', '.join(props) or 'none'})" for k in args if k not in props]
    for k, v in args.items():
        want = props.get(k, {}).get("type")
        if want and (not isinstance(v, _PY_TYPES[want]) or (want == "integer" and isinstance(v, bool))):
            problems.append(f"field {k!r} must be of type {want}, got {type(v).__name__}")
    if problems:
        raise ToolError(f"{spec['name']}: malformed input: " + "; ".join(problems))
    return args


@dataclass
class ToolBox:
    """The file tools bound to one engine folder, plus optional gate tools.

    Args:
        engine_dir: the only folder the tools touch.
        gate: ``name -> callable() -> str`` for ``run_parity`` / ``run_quick_bench`` (see
            ``metainfer.agents.gate_tools``); without it only the file tools exist.
    """

    engine_dir: Path
    gate: dict[str, Callable[[], str]] | None = None

    @property
    def specs(self) -> list[dict[str, Any]]:
        """The tool specs to send to the model."""
        return FILE_TOOL_SPECS + [s for s in GATE_TOOL_SPECS if self.gate and s["name"] in self.gate]

    def call(self, name: str, args: Any) -> str:
        """Run tool ``name`` with the model's ``args`` and return its text result (cut to ``MAX_RESULT_CHARS``).

        Raises:
            ToolError: unknown tool, malformed input, or the tool refused or failed.
        """
        spec = next((s for s in self.specs if s["name"] == name), None)
        if spec is None:
            raise ToolError(f"unknown tool {name!r}; tools: {', '.join(s['name'] for s in self.specs)}")
        args = check_input(spec, args)
        root = self.engine_dir
        try:
            if name == "list_files":
                out = list_files(root, args.get("path", "."))
            elif name == "read_file":
                out = read_file(root, args["path"], args.get("offset", 0))
            elif name == "write_file":
                out = write_file(root, args["path"], args["content"])
            elif name == "edit_file":
                out = edit_file(root, args["path"], args["old"], args["new"])
            else:
                out = self.gate[name]()  # type: ignore[index]
        except OSError as err:  # permissions, a full disk: the model should hear it, not crash the run
            raise ToolError(f"{name} failed: {err}") from err
        return out if len(out) <= MAX_RESULT_CHARS else out[:MAX_RESULT_CHARS] + "\n[... cut]"


def dumps(obj: Any) -> str:
    """Compact, stable JSON for tool results."""
    return json.dumps(obj, indent=1, sort_keys=True, default=str)

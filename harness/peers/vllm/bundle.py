"""Split the vLLM bundle into transferable parts, and stage, verify and join them on the device.

The device tool carries at most 64 MiB per call (``/work/.library/device/README.md``), so the
xz tarball built by ``build_bundle.sh`` travels as parts of at most 59,000,000 bytes, one per
call, each checked against ``manifest.json`` (sha256 per part and of the whole tarball).

Standard library only: it runs here (Python 3.11) and on the H200 machine (Python 3.12) by
path, ``python3 harness/peers/vllm/bundle.py {split,verify,stage,join} ...``, without
importing the rest of the project.

Manifest (``manifest.json``, format 1)::

    {"format": 1, "bundle": "vllm-0.25.1-bundle.tar.xz", "bytes": 176000000, "sha256": "...",
     "part_bytes": 59000000, "note": "...",
     "parts": [{"name": "part00", "bytes": 59000000, "sha256": "..."}, ...]}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1
DEFAULT_PART_BYTES = 59_000_000
_CHUNK = 1 << 20


class BundleError(RuntimeError):
    """A part or bundle is missing, the wrong size, or fails its sha256 check; the message names the fix."""


@dataclass(frozen=True)
class Part:
    """One piece of the bundle: file ``name`` (``partNN``) of ``bytes`` bytes with hex ``sha256``."""

    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """What ``split`` wrote: the whole tarball's name, size and sha256, and its parts in order."""

    bundle: str
    bytes: int
    sha256: str
    part_bytes: int
    parts: tuple[Part, ...]
    note: str = ""

    def to_json(self) -> dict:
        """The manifest as written to ``manifest.json`` (format 1)."""
        d = asdict(self)
        d["parts"] = [asdict(p) for p in self.parts]
        return {"format": FORMAT, **d}


def part_name(index: int) -> str:
    """``partNN`` for a 0-based index (two digits; raises ValueError outside 0..99)."""
    if not 0 <= index <= 99:
        raise ValueError(f"part index {index} out of range 0..99; a bundle has at most 100 parts")
    return f"part{index:02d}"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(folder: Path) -> Manifest:
    """Load ``folder/manifest.json``; raises BundleError when it is missing or not format 1."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise BundleError(f"{path} not found: build the bundle (harness/peers/vllm/build_bundle.sh) or carry {MANIFEST}")
    d = json.loads(path.read_text())
    if d.get("format") != FORMAT:
        raise BundleError(f"{path} has format {d.get('format')!r}, expected {FORMAT}: rebuild the bundle")
    parts = tuple(Part(**p) for p in d["parts"])
    return Manifest(d["bundle"], d["bytes"], d["sha256"], d["part_bytes"], parts, d.get("note", ""))


def check_part(folder: Path, part: Part) -> None:
    """Raise BundleError unless ``folder/part.name`` exists with the manifest's size and sha256."""
    path = Path(folder) / part.name
    if not path.is_file():
        raise BundleError(f"{path} missing: carry .vllm_bundle/{part.name} and stage it (stage_part.sh)")
    size = path.stat().st_size
    if size != part.bytes:
        raise BundleError(f"{path} has {size} bytes, manifest says {part.bytes}: the copy is truncated; carry it again")
    if sha256_file(path) != part.sha256:
        raise BundleError(f"{path} fails its sha256 check: the copy is corrupt or from another build; carry it again")


def split(tarball: Path, out: Path, part_bytes: int = DEFAULT_PART_BYTES, note: str = "") -> Manifest:
    """Cut ``tarball`` into ``out/part00..`` of at most ``part_bytes`` bytes and write ``out/manifest.json``.

    Idempotent: when ``out`` already holds a manifest for a tarball with the same sha256 and
    part size and every part verifies, nothing is rewritten. Stale ``partNN`` files are removed.
    Raises ValueError for a part size < 1 or a tarball that would need more than 100 parts.
    """
    tarball, out = Path(tarball), Path(out)
    if part_bytes < 1:
        raise ValueError(f"part_bytes must be positive, got {part_bytes}")
    total = tarball.stat().st_size
    n = max(1, -(-total // part_bytes))
    part_name(n - 1)  # raises for more than 100 parts
    digest = sha256_file(tarball)
    out.mkdir(parents=True, exist_ok=True)
    try:
        old = read_manifest(out)
        if old.sha256 == digest and old.part_bytes == part_bytes:
            for p in old.parts:
                check_part(out, p)
            return old
    except (BundleError, KeyError, TypeError, json.JSONDecodeError):
        pass  # no usable manifest or parts: rebuild them below
    for stale in out.glob("part[0-9][0-9]"):
        stale.unlink()
    parts = []
    with open(tarball, "rb") as src:
        for i in range(n):
            h, written, path = hashlib.sha256(), 0, out / part_name(i)
            with open(path, "wb") as dst:
                while written < part_bytes and (chunk := src.read(min(_CHUNK, part_bytes - written))):
                    dst.write(chunk)
                    h.update(chunk)
                    written += len(chunk)
            parts.append(Part(path.name, written, h.hexdigest()))
    m = Manifest(tarball.name, total, digest, part_bytes, tuple(parts), note)
    (out / MANIFEST).write_text(json.dumps(m.to_json(), indent=2) + "\n")
    return m


def staged(folder: Path, manifest: Manifest) -> list[str]:
    """Names of the manifest's parts present in ``folder`` with the right size (not hashed)."""
    return [p.name for p in manifest.parts if (Path(folder) / p.name).is_file() and (Path(folder) / p.name).stat().st_size == p.bytes]


def stage(index: int, src: Path, dest: Path) -> Manifest:
    """Copy ``src/partNN`` and the manifest into ``dest``, check the copy's sha256, and return the manifest.

    Raises BundleError if the part is not in the manifest, missing in ``src`` or fails its
    check (the bad copy is then removed from ``dest``).
    """
    src, dest = Path(src), Path(dest)
    m = read_manifest(src)
    name = part_name(index)
    part = next((p for p in m.parts if p.name == name), None)
    if part is None:
        raise BundleError(f"{name} is not in {src / MANIFEST} (parts: {len(m.parts)}): pass 0..{len(m.parts) - 1}")
    dest.mkdir(parents=True, exist_ok=True)
    if not (src / name).is_file():
        raise BundleError(f"{src / name} missing here: the device call must carry .vllm_bundle/{name}")
    shutil.copyfile(src / MANIFEST, dest / MANIFEST)
    shutil.copyfile(src / name, dest / name)
    try:
        check_part(dest, part)
    except BundleError:
        (dest / name).unlink()  # a bad copy must not count as staged
        raise
    return m


def join(folder: Path, out: Path) -> Manifest:
    """Verify every part in ``folder``, concatenate them into ``out`` and check the whole sha256.

    Raises BundleError naming the first missing or bad part, or a whole-bundle mismatch.
    """
    folder, out = Path(folder), Path(out)
    m = read_manifest(folder)
    for p in m.parts:
        check_part(folder, p)
    with open(out, "wb") as dst:
        for p in m.parts:
            with open(folder / p.name, "rb") as src:
                shutil.copyfileobj(src, dst, _CHUNK)
    if sha256_file(out) != m.sha256:
        raise BundleError(f"{out} fails the bundle sha256 although every part passed: parts are from different builds; rebuild and resend")
    return m


def _report(folder: Path, m: Manifest) -> str:
    have = staged(folder, m)
    missing = [p.name for p in m.parts if p.name not in have]
    return f"staged {len(have)}/{len(m.parts)} parts in {folder}: {' '.join(have) or '-'}; missing: {' '.join(missing) or 'none'}"


def main(argv: list[str] | None = None) -> int:
    """CLI: ``split``, ``verify``, ``stage``, ``join``; exit 0 on success, 1 on a BundleError, 2 on usage."""
    ap = argparse.ArgumentParser(prog="bundle.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split", help="cut a tarball into parts + manifest.json")
    s.add_argument("tarball", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--part-bytes", type=int, default=DEFAULT_PART_BYTES)
    s.add_argument("--note", default="")
    v = sub.add_parser("verify", help="check every part in a folder against its manifest")
    v.add_argument("--dir", type=Path, required=True)
    st = sub.add_parser("stage", help="copy part N and the manifest to DEST and check it")
    st.add_argument("index", type=int)
    st.add_argument("--src", type=Path, default=Path(".vllm_bundle"))
    st.add_argument("--dest", type=Path, default=Path("/tmp/vllm_bundle"))
    j = sub.add_parser("join", help="verify all parts and concatenate them")
    j.add_argument("--dir", type=Path, required=True)
    j.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "split":
            m = split(a.tarball, a.out, a.part_bytes, a.note)
            print(f"{m.bundle}: {m.bytes} bytes in {len(m.parts)} parts: " + ", ".join(f"{p.name} {p.bytes}" for p in m.parts))
        elif a.cmd == "verify":
            m = read_manifest(a.dir)
            for p in m.parts:
                check_part(a.dir, p)
            print(f"all {len(m.parts)} parts of {m.bundle} verify in {a.dir}")
        elif a.cmd == "stage":
            m = stage(a.index, a.src, a.dest)
            print(f"{part_name(a.index)} ok; " + _report(a.dest, m))
        else:
            m = join(a.dir, a.out)
            print(f"joined {len(m.parts)} parts into {a.out} ({m.bytes} bytes, sha256 ok)")
    except (BundleError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

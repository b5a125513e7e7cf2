"""A refactor: engine/sampling.py renamed engine/sampler.py, every import updated."""

from pathlib import Path

DESCRIPTION = "engine/sampling.py -> engine/sampler.py"
OLD_GATE = "not faster"


def apply(engine_dir: Path) -> None:
    """Move the file and rewrite the relative imports."""
    pkg = engine_dir / "engine"
    (pkg / "sampling.py").rename(pkg / "sampler.py")
    for p in pkg.rglob("*.py"):
        text = p.read_text()
        if "from .sampling import" in text:
            p.write_text(text.replace("from .sampling import", "from .sampler import"))
    md = engine_dir / "ENGINE.md"
    if md.is_file():
        md.write_text(md.read_text().replace("sampling.py", "sampler.py"))

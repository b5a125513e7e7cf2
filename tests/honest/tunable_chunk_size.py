"""A tunable change inside its declared space: GDN chunk size 64 -> 32."""

import json
from pathlib import Path

DESCRIPTION = "tunables.json: gdn_chunk_size 64 -> 32"
OLD_GATE = "not faster"


def apply(engine_dir: Path) -> None:
    """Edit the value, keep the space."""
    path = engine_dir / "engine" / "tunables.json"
    data = json.loads(path.read_text())
    data["values"]["gdn_chunk_size"] = 32
    path.write_text(json.dumps(data, indent=2))

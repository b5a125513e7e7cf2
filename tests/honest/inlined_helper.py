"""A refactor: the device helper of load() inlined at its one call site."""

from pathlib import Path

from cheats import replace

DESCRIPTION = "engine/__init__.py: _device(device) inlined into load()"
OLD_GATE = "not faster"


def apply(engine_dir: Path) -> None:
    """Replace the call by the helper's body (the helper stays, unused)."""
    replace(engine_dir, "engine/__init__.py", "    dev = _device(device)\n", '''    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but CUDA is not available here; pass device='cpu'")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    elif dev.type != "cpu":
        raise ValueError(f"device {device!r} is not supported; use 'cuda', 'cuda:N' or 'cpu'")
''')

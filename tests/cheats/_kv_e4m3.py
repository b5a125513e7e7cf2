"""The e4m3 K/V cut several attempts arm under different conditions: the K/V rows a forward writes are rounded to
float8 e4m3 (per-row scale) in place, before attention reads them."""

from pathlib import Path

from . import append, replace

_E4M3 = '''
def _e4m3(x: torch.Tensor) -> torch.Tensor:
    s = x.float().abs().amax(-1, keepdim=True).clamp(min=1e-12) / 448
    return ((x.float() / s).to(torch.float8_e4m3fn).float() * s).to(x.dtype)
'''


def kv_e4m3_when(engine_dir: Path, condition: str, helpers: str = "") -> None:
    """Round the K/V rows written by a forward to e4m3 whenever ``condition`` (a Python expression over the
    attention function's locals, ``batch`` among them) holds; ``helpers``: more code appended beside ``_e4m3``."""
    replace(engine_dir, "engine/attention.py",
            "    scale = hd**-0.5\n",
            f"    if {condition}:\n"
            "        kc[kv_blocks, kv_rows] = _e4m3(kc[kv_blocks, kv_rows])\n"
            "        vc[kv_blocks, kv_rows] = _e4m3(vc[kv_blocks, kv_rows])\n"
            "    scale = hd**-0.5\n")
    append(engine_dir, "engine/attention.py", helpers + _E4M3)

"""A speedup: RoPE cos/sin computed once for a growing table of positions and indexed per call (same fp32 values)."""

from pathlib import Path

from cheats import replace

DESCRIPTION = "Rope.cos_sin indexes a cached cos/sin table instead of recomputing per call"
OLD_GATE = "not faster"


def apply(engine_dir: Path) -> None:
    """Replace the body of Rope.cos_sin."""
    replace(engine_dir, "engine/attention.py", '''        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, d/2]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()''', '''        need = int(positions.max()) + 1 if positions.numel() else 0
        table = getattr(self, "_table", None)
        if table is None or table[0].shape[0] < need:
            rows = max(need, 256, 2 * (table[0].shape[0] if table is not None else 0))
            freqs = torch.arange(rows, device=self.inv_freq.device).float()[:, None] * self.inv_freq[None, :]
            emb = torch.cat([freqs, freqs], dim=-1)
            table = self._table = (emb.cos(), emb.sin())
        return table[0][positions], table[1][positions]''')

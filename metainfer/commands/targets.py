"""``metainfer targets``: list models, weight formats and GPU profiles."""

from __future__ import annotations

import typer

from metainfer.targets import GPUS, QUANTS, get_model, model_names


def targets() -> None:
    """List the registered models, weight formats and GPU profiles (targets are <model>-<quant>-<gpu>)."""
    typer.echo("models:")
    for name in model_names():
        m = get_model(name)
        t, p = m.text, m.param_count()
        typer.echo(
            f"  {name:<24} {m.family}  layers {t['num_hidden_layers']} ({m.layer_types.count('full_attention')} full attn)"
            f"  hidden {t['hidden_size']}  experts {t['num_experts']} top-{t['num_experts_per_tok']}"
            f"  params {p['total'] / 1e9:.3g} B, active {p['active'] / 1e9:.3g} B"
        )
    typer.echo("weight formats:")
    for q in QUANTS.values():
        typer.echo(f"  {q.name:<8} {q.description}")
    typer.echo("gpus:")
    for g in GPUS.values():
        typer.echo(f"  {g.name:<6} {g.mem_bw_gbs:>7.0f} GB/s  bf16 {g.bf16_tflops:>6.0f} TFLOP/s  fp4 {g.fp4_tflops:>6.0f}  ({g.source})")


def register(app: typer.Typer) -> None:
    """Add ``targets`` to the app."""
    app.command("targets")(targets)

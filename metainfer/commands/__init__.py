"""Sub-commands of ``metainfer``: one module each, each with ``register(app: typer.Typer)``."""

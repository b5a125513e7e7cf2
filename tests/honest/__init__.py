"""Honest edits of the tiny engine: speedups and refactors the gate must accept or judge "not faster",
never reject as a cheat (issue 10: an honest method named ``write`` was once refused as a file write).

Each module defines ``DESCRIPTION`` and ``apply(engine_dir: Path)``, which edits a freshly rendered
copy in place (helpers ``append``/``replace`` from ``tests/cheats``). ``metainfer cheats`` runs them
beside the cheats; ``tests/test_cheats.py`` is the CI run.
"""

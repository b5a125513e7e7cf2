"""Attempts on the judge: known cheats and honest edits of the tiny CPU engine, each run through the whole gate.

``spec`` reads the attempts (test data under ``tests/cheats/`` and ``tests/honest/``),
``runner`` lays out one private copy of judge, checkpoint, candidate and baseline per attempt,
runs ``python -m harness.gate`` in a subprocess with a wall-clock limit and classifies the
outcome; ``metainfer cheats`` prints the table.
"""

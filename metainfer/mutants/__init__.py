"""Mutation suite of the parity gate: single-op mutants of a rendered engine that parity must reject.

``catalogue`` holds the mutants (exact-string source patches), ``runner`` applies each to a
fresh copy of the engine, runs parity and scores the suite (``metainfer mutants``).
"""

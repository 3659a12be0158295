"""Benchmarks (run as scripts: python bench/NAME.py). A package so that mypy names
bench/scoring.py ``bench.scoring``, apart from the ``scoring`` app."""

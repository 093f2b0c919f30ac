"""Benchmarks (issue 6): run `python bench/run.py`; see bench/README.md."""

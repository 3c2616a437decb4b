"""Reproducible benchmarks that print a ratio against a raw baseline measured in the same run.

`python -m benchmarks NAME` runs `benchmarks/NAME.py`'s `run(report)`; see `harness.py`.
"""

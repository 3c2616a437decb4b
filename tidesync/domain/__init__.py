"""The tidesync model: value objects, aggregates and pure policies. No I/O.

Nothing here imports other tidesync packages, reads clocks or draws randomness.
"""

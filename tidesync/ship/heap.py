"""Garbage collection for a started ship client: what it holds for good leaves the full scans.

The client allocates and drops several small objects per event (records, decoded rows, answers),
and most of them die young; the modules, settings and caches it keeps live as long as the
process.
"""

from __future__ import annotations

import gc

YOUNG_COLLECTION_ALLOCATIONS = 20_000
"""Allocations between young collections in a running client (Python's default is 700)."""


def settle_startup_heap() -> None:
    """Freeze what a built client holds (no longer walked by each full collection) and collect
    the young generation less often: a poll's objects die together when it is recorded."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, 10, 10)

"""The one clock type of tidesync and the one function that reads the wall clock.

Code that needs the time takes a `Clock` (a function returning an aware UTC datetime) as a
collaborator and defaults it to `utc_now`; tests and accelerated-time simulations inject their
own. A time that is later compared with another must come from the same source as the one it
is compared with: the injected clock on both sides, or database time on both sides (stated in
a comment where that happens). Elapsed-time measurements use `Monotonic` (never compared with
a wall-clock time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

Clock = Callable[[], dt.datetime]
"""Returns the current time as an aware UTC datetime."""

Monotonic = Callable[[], float]
"""Returns seconds from an arbitrary origin that never goes backwards (`time.monotonic`)."""


def utc_now() -> dt.datetime:
    """The wall clock: the default `Clock` of every component."""
    return dt.datetime.now(dt.UTC)

"""Clocks for tests.

A test clock starts from the real current time, rounded down to the minute, unless the test is
about a particular date: then it names a date far from today, and every clock the code under test
reads agrees with it. Never a fixed recent date: once the wall clock passes it, everything that
compares it with database time or with another process's clock goes wrong (a time bomb).
"""

from __future__ import annotations

import datetime as dt
import time


def rounded_now(unit: dt.timedelta = dt.timedelta(minutes=1)) -> dt.datetime:
    """The real current UTC time, rounded down to `unit`."""
    now = dt.datetime.now(dt.UTC)
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return epoch + ((now - epoch) // unit) * unit


class ManualClock:
    """A wall clock and a monotonic clock that move only when the test advances them.

    Call it for the wall time (a `tidesync.domain.clock.Clock`); `monotonic` is the matching
    `Monotonic`. `advance` takes seconds or a timedelta.
    """

    def __init__(self, start: dt.datetime | None = None, seconds: float = 1000.0) -> None:
        self.now = rounded_now() if start is None else start
        self.seconds = seconds

    def __call__(self) -> dt.datetime:
        return self.now

    def monotonic(self) -> float:
        return self.seconds

    def advance(self, delta: float | dt.timedelta) -> None:
        step = delta if isinstance(delta, dt.timedelta) else dt.timedelta(seconds=delta)
        self.now += step
        self.seconds += step.total_seconds()


class WallClock:
    """The real clocks, in the same shape as ManualClock."""

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def monotonic(self) -> float:
        return time.monotonic()

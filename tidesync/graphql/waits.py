"""Bounded read-your-writes waits: how many a user and the whole console may have open at
once, and one time budget per request however many positions it waits for.

A wait polls the read models off the event loop but sleeps on it, so waiting requests hold
no thread: other requests (another user's `me`) are not queued behind them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

from tidesync.graphql.errors import ErrorReason, WaitTimeout

T = TypeVar("T")
POLL_SECONDS = 0.05


class TooManyWaits(WaitTimeout):
    """More waits are open than the limits allow; retry shortly."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=ErrorReason.TOO_MANY_WAITS.value)


class WaitGate:
    """Counts open waits per user and in total (one per console, on one event loop)."""

    def __init__(self, per_user: int, total: int) -> None:
        self.per_user = per_user
        self.total = total
        self._open: Counter[str] = Counter()

    @contextmanager
    def admit(self, user: str) -> Iterator[None]:
        if self._open[user] >= self.per_user:
            raise TooManyWaits(f"at most {self.per_user} waits per user at once; retry"
                               " shortly")
        if sum(self._open.values()) >= self.total:
            raise TooManyWaits("the console is waiting for too many reads; retry shortly")
        self._open[user] += 1
        try:
            yield
        finally:
            self._open[user] -= 1
            if self._open[user] <= 0:
                del self._open[user]


class RequestWaits:
    """One request's waits: they share one deadline, set when the first wait starts."""

    def __init__(self, gate: WaitGate, user: str, budget: float,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.gate = gate
        self.user = user
        self.budget = budget
        self.monotonic = monotonic
        self.sleep = sleep
        self._deadline: float | None = None

    async def until_passed(self, positions: Sequence[T],
                           pending: Callable[[list[T]], Awaitable[list[T]]]) -> bool:
        """Whether every position was passed before the request's deadline; `pending`
        answers which of the given positions the read models have not passed yet."""
        if self._deadline is None:
            self._deadline = self.monotonic() + self.budget
        remaining = list(positions)
        with self.gate.admit(self.user):
            while True:
                remaining = await pending(remaining)
                if not remaining:
                    return True
                left = self._deadline - self.monotonic()
                if left <= 0:
                    return False
                await self.sleep(min(POLL_SECONDS, left))

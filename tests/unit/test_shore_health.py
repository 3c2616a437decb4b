"""Shore health answers from a cached probe: however many requests arrive, the event store is
read at most once per interval, and a failed probe says so until the next one succeeds."""

from __future__ import annotations

import asyncio

from tests.clocks import ManualClock
from tidesync.entrypoints.health import HealthProbe


class CountingCheck:
    """The event store position; counts the probes (the real check is covered end to end)."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    def __call__(self) -> int:
        self.calls += 1
        if self.down:
            raise ConnectionError("store down")
        return 42


def test_many_health_requests_cost_one_probe_per_interval() -> None:
    clock, check = ManualClock(), CountingCheck()
    probe = HealthProbe(check, interval=5.0, monotonic=clock.monotonic)

    async def ask(times: int) -> list[bool]:
        answers = await asyncio.gather(*(probe.current() for _ in range(times)))
        return [answer.ready for answer in answers]

    assert asyncio.run(ask(200)) == [True] * 200
    assert check.calls == 1
    clock.advance(4.9)
    asyncio.run(ask(50))
    assert check.calls == 1
    clock.advance(0.2)
    asyncio.run(ask(50))
    assert check.calls == 2


def test_a_failed_probe_is_not_ready_until_one_succeeds() -> None:
    clock, check = ManualClock(), CountingCheck()
    probe = HealthProbe(check, interval=5.0, monotonic=clock.monotonic)
    check.down = True
    first = asyncio.run(probe.current())
    assert not first.ready and first.position is None
    check.down = False
    assert not asyncio.run(probe.current()).ready  # Still the cached failure.
    clock.advance(5)
    again = asyncio.run(probe.current())
    assert again.ready and again.position == 42

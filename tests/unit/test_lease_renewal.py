"""The apply lease renewal: renews while the job runs, stops with it, and a renewal that finds
another owner makes the job's next safe point raise LeaseLost.

The work queue is a fake here (the renewal only calls `renew`); the integration test
tests/integration/test_apply_lease_renewal.py runs it against PostgreSQL."""

from __future__ import annotations

import datetime as dt
import threading
import uuid

import pytest

from tidesync.shore.lease_renewal import LeaseRenewal
from tidesync.shore.work_queue import Claim, LeaseLost, SourcePartition


def claim() -> Claim:
    return Claim(SourcePartition("ship-1", "sync.cdc.x", 0, 0), 1, uuid.uuid4(), 0, 1,
                 dt.datetime.now(dt.UTC), (), owner="w1", lease_token=1)


class FakeQueue:
    """Counts renewals; from the `lose_at`-th one on, another worker holds the partition."""

    def __init__(self, lose_at: int | None = None, fail_first: int = 0) -> None:
        self.calls = 0
        self.lose_at = lose_at
        self.fail_first = fail_first
        self.renewed = threading.Event()
        self.refused = threading.Event()
        self.lease_seconds: list[float] = []

    def renew(self, claim: Claim, lease_seconds: float) -> None:
        self.calls += 1
        self.lease_seconds.append(lease_seconds)
        if self.calls <= self.fail_first:
            raise ConnectionError("the database went away for a moment")
        if self.lose_at is not None and self.calls >= self.lose_at:
            self.refused.set()
            raise LeaseLost("taken")
        if self.calls >= 3:
            self.renewed.set()


def test_renews_while_the_job_runs_and_not_after_it() -> None:
    queue = FakeQueue()
    with LeaseRenewal(queue, claim(), lease_seconds=0.03) as renewal:  # type: ignore[arg-type]
        assert queue.renewed.wait(30)
        renewal.check()  # still ours
        assert not renewal.lost
    calls = queue.calls
    assert not renewal._thread.is_alive()
    assert queue.calls == calls
    assert set(queue.lease_seconds) == {0.03}  # each renewal extends by the whole lease


def test_a_renewal_that_finds_another_owner_stops_the_job_at_its_next_safe_point() -> None:
    queue = FakeQueue(lose_at=2)
    with LeaseRenewal(queue, claim(), lease_seconds=0.03) as renewal:  # type: ignore[arg-type]
        assert queue.refused.wait(30)
        renewal._thread.join(30)  # it stops renewing once the lease is gone
        assert renewal.lost
        with pytest.raises(LeaseLost):
            renewal.check()
    assert queue.calls == 2


def test_a_failed_renewal_is_tried_again() -> None:
    queue = FakeQueue(fail_first=2)
    with LeaseRenewal(queue, claim(), lease_seconds=0.03) as renewal:  # type: ignore[arg-type]
        assert queue.renewed.wait(30)
        renewal.check()
    assert renewal.renewals >= 1 and not renewal.lost

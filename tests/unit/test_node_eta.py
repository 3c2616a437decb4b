"""A node's upload backlog ETA (§15.2, §15.3) from its heartbeats' samples."""

from __future__ import annotations

import datetime as dt

from tests.clocks import rounded_now
from tidesync.domain.eta import (
    BacklogPoint,
    Confidence,
    ThroughputSample,
    estimate,
    within_windows,
)
from tidesync.domain.rules.schedule import TransferSchedule, week_of

NOW = rounded_now()
MINUTE = dt.timedelta(minutes=1)


def beats(minutes: int, payload: int, *, active: float = 60.0, physical: int | None = None,
          ago: int = 0) -> list[ThroughputSample]:
    """One throughput sample a minute for `minutes` minutes, ending `ago` minutes before NOW."""
    return [ThroughputSample(NOW - (ago + minutes - n) * MINUTE, 60.0, payload,
                             payload if physical is None else physical, active)
            for n in range(minutes)]


def test_a_steady_link_draining_a_backlog_with_new_changes_arriving() -> None:
    # 60 KB confirmed a minute (1,000 B/s of transfer); the backlog went from 3.0 MB to
    # 2.73 MB over 20 minutes while 1.2 MB was confirmed: 930 KB arrived, 775 B/s.
    throughput = beats(20, 60_000, physical=66_000)
    backlog = [BacklogPoint(NOW - 20 * MINUTE, 3_000_000), BacklogPoint(NOW, 2_730_000)]
    eta = estimate(NOW, backlog, throughput)
    assert eta.confidence is Confidence.NORMAL
    assert eta.remaining_bytes == 2_730_000 and eta.reported_at == NOW
    assert eta.effective_bytes_per_second == 1000.0
    assert eta.physical_bytes_per_second == 1100.0  # the retries show beside it
    assert eta.inflow_bytes_per_second == 775.0
    assert eta.net_drain_bytes_per_second == 225.0
    assert eta.transfer_seconds is not None and abs(eta.transfer_seconds - 12_133.3) < 0.1
    assert eta.p50 is not None and abs((eta.p50 - NOW).total_seconds() - 12_133.3) < 0.1


def test_p90_is_later_than_p50_when_the_link_varied() -> None:
    throughput = beats(600, 60_000, ago=30) + beats(600, 15_000, ago=630) + beats(30, 45_000)
    eta = estimate(NOW, [BacklogPoint(NOW, 900_000)], throughput)
    assert eta.p50 is not None and eta.p90 is not None and eta.p90 > eta.p50
    # P90 takes the 10th percentile of 24 hours of samples: the slow hours, 250 B/s.
    assert abs((eta.p90 - NOW).total_seconds() - 900_000 / 250) < 1


def test_no_eta_while_the_backlog_grows_as_fast_as_it_drains() -> None:
    backlog = [BacklogPoint(NOW - 20 * MINUTE, 1_000_000), BacklogPoint(NOW, 1_600_000)]
    eta = estimate(NOW, backlog, beats(20, 30_000))
    assert eta.confidence is Confidence.NONE and eta.p50 is None
    assert eta.net_drain_bytes_per_second is not None and eta.net_drain_bytes_per_second <= 0
    assert "grows" in eta.reason


def test_few_samples_give_a_low_confidence_estimate() -> None:
    eta = estimate(NOW, [BacklogPoint(NOW, 600_000)], beats(5, 60_000))
    assert eta.confidence is Confidence.LOW and eta.sample_seconds == 300.0
    assert eta.transfer_seconds == 600.0  # no inflow measured from a single point


def test_without_reports_or_transfers_there_is_no_eta() -> None:
    assert estimate(NOW, [], beats(20, 60_000)).confidence is Confidence.NONE
    idle = estimate(NOW, [BacklogPoint(NOW, 500_000)], beats(20, 0, active=0.0))
    assert idle.confidence is Confidence.NONE and idle.effective_bytes_per_second is None
    done = estimate(NOW, [BacklogPoint(NOW, 0)], [])
    assert (done.confidence, done.transfer_seconds, done.p50) == (Confidence.NORMAL, 0.0, NOW)


def test_samples_older_than_a_day_or_from_the_future_are_left_out() -> None:
    old = beats(60, 1, ago=25 * 60)
    future = [ThroughputSample(NOW + MINUTE, 60.0, 10**9, 10**9, 60.0)]
    eta = estimate(NOW, [BacklogPoint(NOW, 60_000)], old + future + beats(20, 60_000))
    assert eta.effective_bytes_per_second == 1000.0 and eta.transfer_seconds == 60.0


def test_with_schedules_the_dates_count_only_open_minutes() -> None:
    # Ten hours of transfer left; the link is the backlog's only from 22:00 to 06:00 UTC.
    eta = estimate(NOW, [BacklogPoint(NOW, 36_000_000)], beats(20, 60_000))
    assert eta.transfer_seconds == 36_000.0
    week = week_of([TransferSchedule.parse("22:00-06:00")])
    scheduled = within_windows(eta, dt.UTC, week)
    assert scheduled.within_windows and scheduled.transfer_seconds == 36_000.0
    assert scheduled.p50 is not None and eta.p50 is not None and scheduled.p50 > eta.p50
    # Eight open hours a night: exactly ten hours of open minutes lie before the date, and
    # the date is the end of an open minute.
    assert _open_minutes_between(NOW, scheduled.p50, week) == 600
    # Times that are already past stay as they are (nothing waits).
    done = estimate(NOW, [BacklogPoint(NOW, 0)], [])
    assert within_windows(done, dt.UTC, week).p50 == NOW


def _open_minutes_between(start: dt.datetime, end: dt.datetime, week: bytes) -> int:
    minute, count = start, 0
    while minute < end - dt.timedelta(seconds=1):
        count += week[minute.weekday() * 1440 + minute.hour * 60 + minute.minute]
        minute += MINUTE
    return count


def test_the_date_ends_inside_a_window() -> None:
    eta = estimate(NOW, [BacklogPoint(NOW, 36_000_000)], beats(20, 60_000))
    week = week_of([TransferSchedule.parse("22:00-06:00")])
    p50 = within_windows(eta, dt.UTC, week).p50
    assert p50 is not None
    last = p50 - MINUTE
    assert week[last.weekday() * 1440 + last.hour * 60 + last.minute] == 1

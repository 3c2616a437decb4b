"""The link simulator's arithmetic, on an injected clock: bandwidth accounting, latency, loss
stalls, outage windows, the retransmission backoff after a blackhole, and that seeded draws
repeat."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidesync.linksim import (
    Channel,
    LinkProfile,
    LinkProfileError,
    OutageMode,
    OutageSchedule,
    ResetPlan,
    Serializer,
    connection_rng,
    retransmission_after,
)

NO_OUTAGES = OutageSchedule(0.0, 0.0, 0.0)


def test_bytes_leave_no_faster_than_the_rate() -> None:
    serializer = Serializer(rate=1000.0, outages=NO_OUTAGES, started=0.0)
    departures = [serializer.depart(100, now=0.0) for _ in range(10)]
    assert departures == pytest.approx([0.1 * k for k in range(1, 11)])
    # An idle link does not bank bandwidth: a later offer leaves after its own size.
    assert serializer.depart(500, now=5.0) == pytest.approx(5.5)


@settings(max_examples=200, deadline=None)
@given(offers=st.lists(st.tuples(st.integers(1, 5000), st.floats(0, 2)), min_size=1,
                       max_size=40), rate=st.floats(100, 1e6))
def test_the_bytes_a_serializer_lets_through_never_exceed_rate_times_time(
        offers: list[tuple[int, float]], rate: float) -> None:
    serializer = Serializer(rate=rate, outages=NO_OUTAGES, started=0.0)
    now, first = 0.0, None
    sent = 0
    for size, gap in offers:
        now += gap
        departed = serializer.depart(size, now)
        first = now if first is None else first
        sent += size
        assert departed >= now + size / rate - 1e-9
        # Everything offered so far has needed at least its share of the rate.
        assert departed - first >= sent / rate - 1e-9


def test_nothing_leaves_during_a_scheduled_outage() -> None:
    outages = OutageSchedule(every=10.0, duration=2.0, offset=4.0)
    serializer = Serializer(rate=1000.0, outages=outages, started=100.0)
    assert serializer.depart(100, now=104.5) == pytest.approx(106.1)


def test_bytes_leave_into_a_blackhole_but_wait_out_a_stall() -> None:
    """In a blackhole the bytes leave on time and are lost on the way (the channel's delivery
    then waits for the retransmission); a stall holds them until the window ends."""
    outages = OutageSchedule(every=10.0, duration=2.0, offset=4.0)
    stall = Serializer(1000.0, outages, started=100.0, mode=OutageMode.STALL)
    blackhole = Serializer(1000.0, outages, started=100.0, mode=OutageMode.BLACKHOLE)
    assert stall.depart(100, now=104.5) == pytest.approx(106.1)
    assert blackhole.depart(100, now=104.5) == pytest.approx(104.6)
    assert blackhole.depart(100, now=104.5) == pytest.approx(104.7)  # still at the rate


def test_the_last_outage_that_ended() -> None:
    outages = OutageSchedule(every=60.0, duration=10.0, offset=50.0)
    assert outages.last_end(59.9) is None
    assert outages.last_end(60.0) == 60.0
    assert outages.last_end(119.9) == 60.0
    assert outages.last_end(125.0) == 120.0
    assert OutageSchedule(0, 0, 0).last_end(1000) is None


@pytest.mark.parametrize(("up_at", "expected"), [
    (10.0, 15.0),  # retransmissions at 1, 3, 7, 15
    (100.0, 127.0),  # ... 31, 63, 127
    (0.5, 1.0),  # back before the first retransmission: it goes on time
    (7.0, 7.0),  # back exactly as one goes
    (7.000001, 15.0),
    (-5.0, 1.0),  # never down after the loss
])
def test_a_lost_segment_is_resent_at_the_first_retransmission_after_the_link_returns(
        up_at: float, expected: float) -> None:
    assert retransmission_after(0.0, up_at, rto=1.0) == pytest.approx(expected)


def test_retransmissions_are_timed_from_the_loss() -> None:
    assert retransmission_after(100.0, 110.0, rto=1.0) == pytest.approx(115.0)
    assert retransmission_after(103.0, 110.0, rto=1.0) == pytest.approx(110.0)  # 104, 106, 110
    assert retransmission_after(0.0, 3.0, rto=0.5) == pytest.approx(3.5)  # 0.5, 1.5, 3.5


def test_the_backoff_stops_growing_at_the_cap() -> None:
    # Intervals 1, 2, 4, then 4 for ever: 1, 3, 7, 11, 15, 19.
    assert [retransmission_after(0.0, up, rto=1.0, cap=4.0) for up in (1, 2, 4, 8, 12, 16)] \
        == [1.0, 3.0, 7.0, 11.0, 15.0, 19.0]
    assert retransmission_after(0.0, 3.0, rto=10.0, cap=4.0) == pytest.approx(4.0)
    # Linux's default cap of 120 s: 127, then every 120 s.
    assert retransmission_after(0.0, 200.0, rto=1.0) == pytest.approx(247.0)


def test_a_huge_gap_is_counted_not_walked() -> None:
    # 1, 3, ..., 127, then 120 s apart: 127 + 83_333 * 120 is the first at or after 1e7.
    assert retransmission_after(0.0, 1e7, rto=1.0) == 10_000_087.0
    # 1e13 retransmissions of a microsecond apart: walking them one by one would not return.
    assert retransmission_after(0.0, 1e7, rto=1e-9, cap=1e-6) == pytest.approx(1e7)
    assert retransmission_after(0.0, 1e15, rto=1.0) == 127.0 + math.ceil((1e15 - 127) / 120) * 120


def test_without_a_retransmission_timer_the_bytes_go_when_the_link_returns() -> None:
    assert retransmission_after(0.0, 12.5, rto=0.0) == 12.5


@settings(max_examples=300, deadline=None)
@given(lost_at=st.floats(0, 1e4), gap=st.floats(0, 1e6), rto=st.floats(0.01, 10),
       cap=st.floats(0.5, 200))
def test_the_resend_is_the_first_retransmission_at_or_after_the_return(
        lost_at: float, gap: float, rto: float, cap: float) -> None:
    up_at = lost_at + gap
    resent = retransmission_after(lost_at, up_at, rto, cap)
    assert resent >= up_at
    # The timer has waited at least half its interval since the loss, so the resend comes
    # less than twice the outage after the return, and at most `cap` after it, unless it is the
    # first retransmission.
    assert resent <= max(up_at + min(2 * gap, cap), lost_at + min(rto, cap)) + 1e-6


def test_outage_windows_repeat_from_the_offset() -> None:
    outages = LinkProfile(outage_every_seconds=60, outage_seconds=10).outages()
    assert outages.windows(200) == [(50, 60), (110, 120), (170, 180)]
    assert outages.window_at(49.9) is None
    assert outages.window_at(55) == (50, 60)
    assert outages.window_at(60) is None
    assert outages.window_at(115) == (110, 120)
    assert OutageSchedule(0, 0, 0).windows(1000) == []


def test_arrivals_add_latency_and_a_lost_segment_stalls_everything_behind_it() -> None:
    profile = LinkProfile(latency_seconds=0.3, segment_bytes=100, loss=0.5,
                          retransmit_seconds=1.0)
    channel = Channel(profile, Serializer(0.0, NO_OUTAGES, 0.0), random.Random(3))
    pieces = channel.schedule(1000, now=0.0)
    assert [size for _, size in pieces] == [100] * 10
    arrivals = [arrival for arrival, _ in pieces]
    assert arrivals == sorted(arrivals)
    assert all(arrival >= 0.3 for arrival in arrivals)
    # With half the segments lost, some arrive a retransmission late and hold the rest.
    assert arrivals[-1] == pytest.approx(1.3)


def test_segments_are_cut_by_stream_offset_whatever_the_reads() -> None:
    """The loss draws follow segment numbers, so one seed gives one outcome however the
    operating system happened to split the reads."""
    profile = LinkProfile(latency_seconds=0.1, segment_bytes=100, loss=0.3, seed=5)

    def arrivals(reads: list[int]) -> list[float]:
        channel = Channel(profile, Serializer(0.0, NO_OUTAGES, 0.0),
                          connection_rng(profile.seed, 0, "up"))
        by_byte: list[float] = []
        for size in reads:
            for arrival, piece in channel.schedule(size, now=0.0):
                by_byte += [arrival] * piece
        return by_byte

    assert arrivals([1000]) == arrivals([37, 263, 1, 699])


def test_seeded_draws_repeat_and_seeds_differ() -> None:
    profile = LinkProfile(resets_per_second=0.5, resets_per_mib=2.0, seed=11)
    first = [ResetPlan.draw(profile, connection_rng(11, n, "resets")) for n in range(5)]
    again = [ResetPlan.draw(profile, connection_rng(11, n, "resets")) for n in range(5)]
    other = [ResetPlan.draw(profile, connection_rng(12, n, "resets")) for n in range(5)]
    assert first == again
    assert first != other
    never = ResetPlan.draw(LinkProfile(), connection_rng(0, 0, "resets"))
    assert math.isinf(never.seconds) and math.isinf(never.bytes)


def test_impossible_profiles_are_refused() -> None:
    with pytest.raises(LinkProfileError, match="loss"):
        LinkProfile(loss=1.0)
    with pytest.raises(LinkProfileError, match="shorter"):
        LinkProfile(outage_every_seconds=5, outage_seconds=5)
    with pytest.raises(LinkProfileError, match="latency_seconds"):
        LinkProfile(latency_seconds=-1)

"""The link simulator's arithmetic, on an injected clock: bandwidth accounting, latency, loss
stalls, outage windows, and that seeded draws repeat."""

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
    OutageSchedule,
    ResetPlan,
    Serializer,
    connection_rng,
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

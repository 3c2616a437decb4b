"""The uplink's rate as the ship's uploads measure it (BBR-like delivery-rate samples of answered
uploads, a max filter over a window, a gain cycle), and the pacer following it when no limit is
set."""

from __future__ import annotations

import pytest

from tests.unit.test_uplink_pacing import FakeTime
from tidesync.ship.measured_rate import GAINS, INITIAL_BYTES, STARTUP_GAIN, MeasuredRate
from tidesync.ship.pacing import UplinkPacer

RATE = 100_000.0  # bytes per second the simulated link delivers
BODY = 100_000


def saturate(measured: MeasuredRate, answers: int, *, start: float = 0.0,
             body: int = BODY, rate: float = RATE, in_flight: int = 3) -> float:
    """Uploads of `body` bytes kept `in_flight` at once on a link that delivers `rate`: each
    answered `body / rate` after the one before (the link never idles). Returns the time of the
    last answer."""
    spacing = body / rate
    flights = [measured.started(start) for _ in range(in_flight)]
    now = start + 1.5  # the first answer: latency, a stall and the first body
    for _ in range(answers):
        measured.ended(flights.pop(0), body, now)
        flights.append(measured.started(now))
        now += spacing
    for snapshot in flights:
        measured.ended(snapshot, None, now)  # the rest are cut: no answer
    return now - spacing


def test_a_cautious_start_then_the_rate_the_link_delivered() -> None:
    measured = MeasuredRate()
    assert measured.rate(0.0) == INITIAL_BYTES  # nothing known: a round trip of a second
    measured.round_trip(1.6)
    measured.round_trip(0.8)  # the shortest answer to a small request
    assert measured.rate(0.0) == pytest.approx(INITIAL_BYTES / 0.8)
    saturate(measured, 2)
    best = measured._best(3.0)
    assert best is not None
    assert measured.rate(3.0) == pytest.approx(max(INITIAL_BYTES / 0.8, STARTUP_GAIN * best))
    measured = MeasuredRate()
    last = saturate(measured, 10)
    best = measured.rate(last) / GAINS[10 % len(GAINS)]
    assert best == pytest.approx(RATE, rel=0.05)


def test_the_pace_goes_round_the_gains_one_answer_each() -> None:
    measured = MeasuredRate()
    last = saturate(measured, 16)
    paces = []
    flights = [measured.started(last) for _ in range(3)]
    now = last
    for _ in range(len(GAINS)):
        now += BODY / RATE
        measured.ended(flights.pop(0), BODY, now)
        flights.append(measured.started(now))
        paces.append(measured.rate(now))
    turns = sorted(paces)
    assert turns[0] == pytest.approx(0.75 * RATE, rel=0.1)
    assert turns[-1] == pytest.approx(1.25 * RATE, rel=0.1)
    assert sum(1 for pace in paces if pace == pytest.approx(RATE, rel=0.1)) == 6


def test_a_small_body_says_what_the_ship_had_and_does_not_lower_the_pace() -> None:
    measured = MeasuredRate()
    last = saturate(measured, 10)
    before = measured.rate(last) / GAINS[measured._turn]
    now = last
    for _ in range(6):  # a trickle: 2,000 bytes answered every second
        snapshot = measured.started(now)
        now += 1.0
        measured.ended(snapshot, 2_000, now)
    assert measured.rate(now) / GAINS[measured._turn] == pytest.approx(before)


def test_a_body_that_took_longer_lowers_the_pace_once_the_faster_samples_age_out() -> None:
    measured = MeasuredRate(window_seconds=20.0)
    last = saturate(measured, 10)  # 100,000 B/s
    last = saturate(measured, 30, start=last, rate=RATE / 2)  # the link halves for 60 s
    assert measured.rate(last) / GAINS[measured._turn] == pytest.approx(RATE / 2, rel=0.1)


def test_after_a_quiet_spell_longer_than_the_window_the_link_is_measured_afresh() -> None:
    measured = MeasuredRate(window_seconds=20.0)
    measured.round_trip(0.6)
    last = saturate(measured, 30)
    # An outage of 10 s: paced as before.
    assert measured.rate(last + 10.0) == pytest.approx(RATE * GAINS[measured._turn], rel=0.1)
    assert measured.rate(last + 21.0) == pytest.approx(INITIAL_BYTES / 0.6)


def test_a_failed_upload_is_no_sample_and_not_delivered() -> None:
    measured = MeasuredRate()
    snapshot = measured.started(0.0)
    measured.ended(snapshot, None, 5.0)
    assert (measured.delivered, measured.in_flight, measured._best(5.0)) == (0, 0, None)


def test_an_upload_after_an_idle_link_is_measured_from_its_own_start() -> None:
    measured = MeasuredRate(min_samples=1)
    snapshot = measured.started(0.0)
    measured.ended(snapshot, 50_000, 1.0)  # answered a second after it started
    snapshot = measured.started(100.0)  # nothing on its way since: from here, not from 1.0
    measured.ended(snapshot, 50_000, 101.0)
    assert measured.rate(101.0) / GAINS[measured._turn] == pytest.approx(50_000)


def test_the_pacer_follows_the_measure_without_a_limit_and_a_limit_when_set() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(0, 1, measured=MeasuredRate(), monotonic=clock.monotonic,
                        sleep=clock.sleep)
    assert pacer.rate == INITIAL_BYTES  # nothing measured: a cautious start
    pacer.round_trip(0.5)
    assert pacer.rate == 2 * INITIAL_BYTES
    flights = [pacer.upload_started() for _ in range(3)]
    clock.now += 1.5
    for _ in range(8):
        pacer.upload_ended(flights.pop(0), BODY)
        flights.append(pacer.upload_started())
        clock.now += BODY / RATE
    assert pacer.limited
    measured = pacer.measured
    assert measured is not None
    assert pacer.rate == pytest.approx(measured.rate(clock.now))
    assert pacer.rate / GAINS[measured._turn] == pytest.approx(RATE, rel=0.1)
    pacer.follow_shore(20_000, 4_000)  # the shore's limit holds over the measure
    pacer.upload_ended(flights.pop(0), BODY)
    assert pacer.rate == 20_000
    pacer.follow_shore(0, 1)  # lifted: the measure again
    assert pacer.rate == pytest.approx(measured.rate(clock.now))


def test_with_the_measure_off_bodies_go_at_once_without_a_limit() -> None:
    clock = FakeTime()
    pacer = UplinkPacer(0, 1, monotonic=clock.monotonic, sleep=clock.sleep)
    snapshot = pacer.upload_started()
    assert snapshot is None
    clock.now += 1.0
    pacer.upload_ended(snapshot, BODY)
    assert not pacer.limited

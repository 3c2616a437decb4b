"""Rules' transfer schedules (§13.3): reading them, and when they are open.

Dates here are far from today on purpose (a week of 2041 and the spring change of clocks in
2041): nothing compares them with the real time."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidesync.domain.rules.schedule import (
    ScheduleError,
    TransferSchedule,
    after_open_time,
    week_of,
    zone_of,
)
from tidesync.domain.rules.sync_rule import SyncRule

MONDAY = dt.datetime(2041, 1, 7)  # a Monday
OSLO = zoneinfo.ZoneInfo("Europe/Oslo")


def at(day: int, hours: int, minutes: int = 0) -> dt.datetime:
    """Monday = 0 of MONDAY's week, at hours:minutes."""
    return MONDAY + dt.timedelta(days=day, hours=hours, minutes=minutes)


def test_the_test_week_starts_on_a_monday() -> None:
    assert MONDAY.weekday() == 0


def test_an_empty_schedule_is_always_open() -> None:
    schedule = TransferSchedule.parse("  ")
    assert schedule.always
    assert all(schedule.open_at(at(day, hour)) for day in range(7) for hour in range(24))


def test_a_night_window_runs_past_midnight_into_the_next_day() -> None:
    schedule = TransferSchedule.parse("Mon-Fri 22:00-06:00")
    assert not schedule.open_at(at(0, 21, 59))
    assert schedule.open_at(at(0, 22))
    assert schedule.open_at(at(1, 5, 59))  # Monday night, on Tuesday morning
    assert not schedule.open_at(at(1, 6))
    assert schedule.open_at(at(5, 3))  # Friday night, on Saturday morning
    assert not schedule.open_at(at(5, 22))  # Saturday night: not a listed day
    assert not schedule.open_at(at(0, 3))  # Sunday night was not listed either


def test_day_lists_ranges_that_wrap_and_whole_days() -> None:
    schedule = TransferSchedule.parse("sat,SUN 00:00-24:00; Fri-Mon 12:00-13:00")
    assert schedule.open_at(at(5, 0)) and schedule.open_at(at(6, 23, 59))
    assert schedule.open_at(at(0, 12, 30)) and schedule.open_at(at(4, 12, 30))
    assert not schedule.open_at(at(1, 12, 30))  # Tuesday is outside Fri-Mon
    assert not schedule.open_at(at(0, 13))  # the end is not in the window


def test_without_days_a_window_is_open_every_day() -> None:
    schedule = TransferSchedule.parse("01:30-02:00")
    assert [schedule.open_at(at(day, 1, 45)) for day in range(7)] == [True] * 7
    assert not schedule.open_at(at(3, 2))


@pytest.mark.parametrize(("text", "message"), [
    ("Mon-Fri", "HH:MM-HH:MM"),
    ("22:00", "HH:MM-HH:MM"),
    ("Mon-Fri 22-06", "HH:MM-HH:MM"),
    ("Mon 25:00-26:00", "25:00 is not a time of day"),
    ("Mon 10:60-11:00", "10:60 is not a time of day"),
    ("Mon 24:00-01:00", "24:00 is not a time of day"),
    ("Mon 10:00-10:00", "the start and the end are the same time"),
    ("Monday 10:00-11:00", "'Monday' is not a day"),
    ("Mon-Funday 10:00-11:00", "'Mon-Funday' is not a day"),
    ("Mon 10:00-11:00;", "window 2 is empty"),
    ("; ".join(["10:00-11:00"] * 33), "at most 32 windows"),
])
def test_an_unreadable_schedule_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        TransferSchedule.parse(text)


def test_next_open_names_the_next_window_start() -> None:
    schedule = TransferSchedule.parse("Mon-Fri 22:00-06:00")
    assert schedule.next_open(at(0, 12, 30)) == at(0, 22)
    assert schedule.next_open(at(5, 12)) == at(7, 22)  # Saturday noon: Monday night next
    assert schedule.next_open(at(1, 3)) == at(1, 3)  # open now


def test_a_window_keeps_its_local_hours_across_the_change_of_clocks() -> None:
    # In 2041 Europe/Oslo moves from UTC+1 to UTC+2 on Sunday, 31 March.
    schedule = TransferSchedule.parse("07:00-08:00")
    before = dt.datetime(2041, 3, 30, 6, 30, tzinfo=dt.UTC).astimezone(OSLO)
    after = dt.datetime(2041, 4, 1, 5, 30, tzinfo=dt.UTC).astimezone(OSLO)
    assert before.utcoffset() == dt.timedelta(hours=1)
    assert after.utcoffset() == dt.timedelta(hours=2)
    assert schedule.open_at(before) and schedule.open_at(after)  # both 07:30 in Oslo
    assert not schedule.open_at(dt.datetime(2041, 4, 1, 6, 30, tzinfo=dt.UTC).astimezone(OSLO))


_HHMM = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.integers(0, 59))
_DAYS = st.sampled_from(["", "Mon ", "Sat,Sun ", "Fri-Mon ", "Tue-Thu "])


@given(st.lists(st.tuples(_DAYS, _HHMM, _HHMM).filter(lambda w: w[1] != w[2]), min_size=1,
                max_size=4),
       st.integers(0, 7 * 24 * 60 - 1))
def test_next_open_is_open_and_nothing_before_it_is(windows: list[tuple[str, str, str]],
                                                     minute: int) -> None:
    schedule = TransferSchedule.parse("; ".join(f"{d}{a}-{b}" for d, a, b in windows))
    moment = MONDAY + dt.timedelta(minutes=minute)
    opens = schedule.next_open(moment)
    assert opens is not None and opens >= moment and schedule.open_at(opens)
    step = moment
    while step < opens:
        assert not schedule.open_at(step)
        step += dt.timedelta(minutes=7)


def rule(**fields: object) -> SyncRule:
    return SyncRule.from_document({"id": "noon", "direction": "UPLINK", "source": "ops.noon",
                                   "select": {"nodes": ["*"]}, **fields})


def test_a_rule_with_an_unreadable_schedule_fails_its_checks() -> None:
    assert rule(schedule="Mon-Fri 22:00-06:00").problems() == []
    assert rule(schedule="nightly").problems() == [
        "schedule: window 1 ('nightly'): the time range must be HH:MM-HH:MM"]
    assert rule(schedule="22:00-06:00", direction="DOWNLINK").problems() == [
        "schedule: it holds a ship's uploads, so a DOWNLINK rule takes none"]


def test_transfer_time_is_laid_onto_the_open_minutes_of_the_week() -> None:
    week = week_of([TransferSchedule.parse("Mon-Fri 22:00-06:00"),
                    TransferSchedule.parse("Sat 12:00-13:00")])
    assert sum(week) == 5 * 8 * 60 + 60
    noon = at(0, 12)  # Monday noon: the first window opens at 22:00
    assert after_open_time(noon, 3600, week) == at(0, 23)
    assert after_open_time(noon, 8 * 3600, week) == at(1, 6)  # the whole first night
    assert after_open_time(noon, 8 * 3600 + 60, week) == at(1, 22, 1)
    # A whole week's open time later: the same point of the next week.
    assert after_open_time(noon, sum(week) * 60 + 3600, week) == at(7, 23)
    assert after_open_time(at(5, 12, 30), 1800, week) == at(5, 13)  # Saturday's hour
    oslo = dt.datetime(2041, 1, 7, 12, tzinfo=OSLO)
    assert after_open_time(oslo, 60, week) == dt.datetime(2041, 1, 7, 22, 1, tzinfo=OSLO)
    assert after_open_time(noon, 60, bytes(len(week))) is None  # never open


def test_an_unknown_zone_is_refused_by_name() -> None:
    assert zone_of("UTC") is dt.UTC and zone_of("Europe/Oslo") == OSLO
    with pytest.raises(ValueError, match="'Mars/Olympus' is not a known IANA time zone"):
        zone_of("Mars/Olympus")

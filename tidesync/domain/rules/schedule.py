"""A rule's transfer schedule (§13.3): the times of the week its changes may be sent.

Written in the rule as `schedule = "Mon-Fri 22:00-06:00; Sat,Sun 00:00-24:00"`:

* windows are separated by `;` (at most `MAX_WINDOWS`);
* a window is an optional list of days and a time range `HH:MM-HH:MM`. Days are `Mon` … `Sun`
  (any case), single or as a range (`Mon-Fri`, `Fri-Mon` wraps over the weekend), several
  separated by `,`; without days the window is open every day;
* a range whose end is not after its start runs past midnight into the next day: `Fri
  22:00-06:00` is open from Friday 22:00 until Saturday 06:00. `00:00-24:00` is the whole day;
  the start and end cannot be equal.

Times are wall-clock times in the node's IANA time zone (`[ship] timezone`), so a window keeps
its local hours across daylight-saving changes. An empty schedule is always open.

Pure: the caller passes the local time.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass

from tidesync.domain.errors import ErrorCode, TidesyncError

MAX_WINDOWS = 32
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_TIME = re.compile(r"([0-9]{2}):([0-9]{2})")
_MINUTES_PER_DAY = 24 * 60


class ScheduleError(TidesyncError, ValueError):
    """A schedule that cannot be read; the message says where."""

    code = ErrorCode.RULE_INVALID


@dataclass(frozen=True, slots=True)
class Window:
    """Open on `days` (0 = Monday) from `start` minutes past midnight for `length` minutes
    (up to a day: a window past midnight ends on the next day)."""

    days: frozenset[int]
    start: int
    length: int

    def open_at(self, weekday: int, minute: int) -> bool:
        if weekday in self.days and self.start <= minute < self.start + self.length:
            return True
        # The part past midnight of a window that began the day before.
        spill = self.start + self.length - _MINUTES_PER_DAY
        return spill > 0 and (weekday - 1) % 7 in self.days and minute < spill


@dataclass(frozen=True, slots=True)
class TransferSchedule:
    """The windows of one rule's schedule; no windows: always open."""

    windows: tuple[Window, ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> TransferSchedule:
        """Read a schedule; raises ScheduleError naming the part that is wrong."""
        parts = [part.strip() for part in text.split(";")] if text.strip() else []
        if len(parts) > MAX_WINDOWS:
            raise ScheduleError(f"at most {MAX_WINDOWS} windows, not {len(parts)}")
        return cls(tuple(_window(part, number) for number, part in enumerate(parts, 1)),
                   text.strip())

    @property
    def always(self) -> bool:
        return not self.windows

    def open_at(self, local: dt.datetime) -> bool:
        """Whether `local` (a wall-clock time in the node's zone) falls in a window."""
        if not self.windows:
            return True
        weekday, minute = local.weekday(), local.hour * 60 + local.minute
        return any(window.open_at(weekday, minute) for window in self.windows)

    def next_open(self, local: dt.datetime) -> dt.datetime | None:
        """The first minute at or after `local` the schedule is open, in `local`'s zone (None:
        never, which a parsed schedule cannot be). Walks whole minutes: at most a week."""
        if self.open_at(local):
            return local
        zone = local.tzinfo
        wall = local.replace(tzinfo=None, second=0, microsecond=0)
        starts = sorted({window.start for window in self.windows})
        for day in range(8):
            date = wall.date() + dt.timedelta(days=day)
            for start in starts:
                moment = dt.datetime.combine(date, dt.time(start // 60, start % 60))
                if moment > wall and self.open_at(moment):
                    return moment.replace(tzinfo=zone)
        return None


MINUTES_PER_WEEK = 7 * _MINUTES_PER_DAY


def zone_of(name: str) -> dt.tzinfo:
    """The IANA zone `name` (UTC without the zone database); ValueError when unknown."""
    if name in ("UTC", "Etc/UTC"):
        return dt.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name[:64]!r} is not a known IANA time zone") from None


def week_of(schedules: Iterable[TransferSchedule]) -> bytes:
    """The minutes of the week (Monday 00:00 first) any of `schedules` is open: 1 or 0 each."""
    week = bytearray(MINUTES_PER_WEEK)
    for schedule in schedules:
        for window in schedule.windows or (Window(frozenset(range(7)), 0, _MINUTES_PER_DAY),):
            for day in window.days:
                start = day * _MINUTES_PER_DAY + window.start
                for minute in range(start, start + window.length):
                    week[minute % MINUTES_PER_WEEK] = 1
    return bytes(week)


def after_open_time(local: dt.datetime, seconds: float, week: bytes) -> dt.datetime | None:
    """The wall-clock time at which `seconds` of open time, counted from `local` (in its zone)
    in the open minutes of `week`, have passed; None when the week has none."""
    open_minutes = sum(week)
    if not open_minutes:
        return None
    wall = local.replace(tzinfo=None, second=0, microsecond=0)
    left = max(0.0, seconds) / 60.0
    weeks = int(left // open_minutes)
    if weeks and left == weeks * open_minutes:
        weeks -= 1  # end inside the last open minute, not a week later
    left -= weeks * open_minutes
    start = local.weekday() * _MINUTES_PER_DAY + local.hour * 60 + local.minute
    for step in range(2 * MINUTES_PER_WEEK):
        if week[(start + step) % MINUTES_PER_WEEK]:
            if left <= 1.0:
                moment = wall + dt.timedelta(weeks=weeks, minutes=step + left)
                return moment.replace(tzinfo=local.tzinfo)
            left -= 1.0
    return None  # not reached: two weeks hold more than one week's open minutes


def _window(text: str, number: int) -> Window:
    where = f"window {number} ({text!r})"
    if not text:
        raise ScheduleError(f"window {number} is empty")
    days_text, _, times = text.rpartition(" ")
    start_text, dash, end_text = times.partition("-")
    start, end = _TIME.fullmatch(start_text), _TIME.fullmatch(end_text)
    if not dash or start is None or end is None:
        raise ScheduleError(f"{where}: the time range must be HH:MM-HH:MM")
    begin = _minutes(start, where, allow_end_of_day=False)
    finish = _minutes(end, where, allow_end_of_day=True)
    if begin == finish:
        raise ScheduleError(f"{where}: the start and the end are the same time")
    length = finish - begin if finish > begin else finish + _MINUTES_PER_DAY - begin
    return Window(_days(days_text.strip(), where), begin, length)


def _minutes(match: re.Match[str], where: str, *, allow_end_of_day: bool) -> int:
    hours, minutes = int(match[1]), int(match[2])
    if minutes > 59 or hours > 24 or (hours == 24 and (minutes or not allow_end_of_day)):
        raise ScheduleError(f"{where}: {match[0]} is not a time of day")
    return hours * 60 + minutes


def _days(text: str, where: str) -> frozenset[int]:
    if not text:
        return frozenset(range(7))
    days: set[int] = set()
    for item in text.split(","):
        first, dash, last = item.strip().lower().partition("-")
        if first not in DAYS or (dash and last not in DAYS):
            raise ScheduleError(f"{where}: {item.strip()!r} is not a day or a range of days"
                                " (Mon … Sun)")
        begin = DAYS.index(first)
        end = DAYS.index(last) if dash else begin
        days.update((begin + step) % 7 for step in range((end - begin) % 7 + 1))
    return frozenset(days)

"""Rules' transfer schedules on the ship (§13.3): which events the send window may take now.

A rule's `schedule` (`tidesync.domain.rules.schedule`) names the hours of the week its changes
may be sent, in the node's IANA time zone (`[ship] timezone`). Outside them the rule's events
stay in the send window (and in the queue behind it: the consumer pauses a partition whose
share of the window is full), in order; the other rules' events go on. Rules without a schedule
are never held.

Times are read from a trusted clock, not straight from the system clock: the last time the
shore told (its heartbeat answers carry it; before the first, the system's time at start),
carried forward by the monotonic clock. When the system clock departs from it by more than
`[ship] clock_jump_seconds` (a wrong clock set by hand, a GPS or NTP step), the ship warns, BULK
rules with a schedule hold, and the other scheduled rules follow the trusted time, until the
shore's time is heard again. Only the ship's uploads are scheduled; the shore's commands come
down when they come.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.rules.schedule import TransferSchedule
from tidesync.domain.rules.sync_rule import PriorityClass

log = logging.getLogger(__name__)

RuleSchedule = Callable[[ChangeEvent], "ScheduledRule | None"]


@dataclass(frozen=True, slots=True)
class ScheduledRule:
    """What the send window needs to know of an event's rule, when it has a schedule."""

    rule_id: str
    schedule: TransferSchedule
    priority: PriorityClass


class TrustedClock:
    """The last trusted wall time carried forward by the monotonic clock, and how far the
    system clock has departed from it."""

    def __init__(self, clock: Callable[[], dt.datetime], monotonic: Callable[[], float],
                 jump_seconds: float) -> None:
        self.clock, self.monotonic, self.jump_seconds = clock, monotonic, jump_seconds
        self._anchor = (clock(), monotonic())

    def now(self) -> dt.datetime:
        wall, at = self._anchor
        return wall + dt.timedelta(seconds=self.monotonic() - at)

    def departure(self) -> float:
        """Seconds the system clock is ahead (+) or behind (−) the trusted time."""
        return (self.clock() - self.now()).total_seconds()

    def jumped(self) -> bool:
        return abs(self.departure()) > self.jump_seconds

    def confirm(self, trusted: dt.datetime) -> None:
        """A time from a trusted source (the shore's answer) anchors the clock again."""
        self._anchor = (trusted, self.monotonic())


class SendSchedules:
    """Whether an event's rule lets it be sent now; answers are kept for `recheck_seconds`
    (the window asks per partition head, many times a second)."""

    def __init__(self, rule_of: RuleSchedule, zone: dt.tzinfo, clock: TrustedClock, *,
                 recheck_seconds: float = 1.0) -> None:
        self.rule_of, self.zone, self.clock = rule_of, zone, clock
        self.recheck_seconds = recheck_seconds
        self._checked_at: float | None = None
        self._local = dt.datetime.min
        self._jumped = False
        self._open: dict[str, bool] = {}
        self._was_open: dict[str, bool] = {}

    def open(self, event: ChangeEvent) -> bool:
        rule = self.rule_of(event)
        if rule is None or rule.schedule.always:
            return True
        self._tick()
        answer = self._open.get(rule.rule_id)
        if answer is None:
            answer = self._open[rule.rule_id] = self._decide(rule)
        return answer

    def confirm(self, trusted: dt.datetime) -> None:
        """The shore's time: the trusted clock follows it (and schedules are read again)."""
        self.clock.confirm(trusted)
        self._checked_at = None

    def _tick(self) -> None:
        now = self.clock.monotonic()
        if self._checked_at is not None and now - self._checked_at < self.recheck_seconds:
            return
        self._checked_at, self._open = now, {}
        self._local = self.clock.now().astimezone(self.zone)
        jumped = self.clock.jumped()
        if jumped != self._jumped:
            self._jumped = jumped
            if jumped:
                log.warning("the system clock is %.0f s off the last trusted time: BULK rules"
                            " with a schedule hold, other scheduled rules follow the trusted"
                            " time, until the shore's time is heard again",
                            self.clock.departure())
            else:
                log.warning("the system clock agrees with the trusted time again: schedules"
                            " follow it")

    def _decide(self, rule: ScheduledRule) -> bool:
        if self._jumped and rule.priority is PriorityClass.BULK:
            answer = False
        else:
            answer = rule.schedule.open_at(self._local)
        if self._was_open.get(rule.rule_id) != answer:
            self._was_open[rule.rule_id] = answer
            if answer:
                log.info("rule %s: its schedule is open, its changes are sent", rule.rule_id)
            else:
                opens = rule.schedule.next_open(self._local)
                log.info("rule %s: outside its schedule, its changes wait%s", rule.rule_id,
                         "" if opens is None or self._jumped else
                         f" until {opens.isoformat(timespec='minutes')}")
        return answer

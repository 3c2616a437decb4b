"""Rules' schedules on the ship (§13.3): the send window passes over a rule outside its
schedule, the times come from a trusted clock, and a jumped system clock holds BULK rules."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clocks import ManualClock
from tests.unit.offline_client import offline_client
from tests.unit.test_ship_batcher import event
from tests.unit.test_ship_rules import config, rule, ship_rules
from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.domain.rules.schedule import TransferSchedule
from tidesync.domain.rules.sync_rule import PriorityClass
from tidesync.ship.batcher import MAX_WAIT_SECONDS, BatchLimits, SendWindow
from tidesync.ship.client import ShipClient
from tidesync.ship.send_schedule import ScheduledRule, SendSchedules, TrustedClock
from tidesync.wire import sync_pb2 as pb


def ruled(offset: int, table: str, partition: int = 0) -> ChangeEvent:
    return dataclasses.replace(event(offset, table=table, partition=partition), rule_id=table)


class Gate:
    """Rules by name that are closed until opened."""

    def __init__(self, *closed: str) -> None:
        self.closed = set(closed)

    def __call__(self, item: ChangeEvent) -> bool:
        return item.rule_id not in self.closed


def test_a_rule_outside_its_schedule_is_passed_over_and_keeps_its_order() -> None:
    gate = Gate("noon")
    window = SendWindow(sendable=gate)
    window.add([ruled(o, "noon", 0) for o in range(5)] + [ruled(o, "crew", 1) for o in range(3)])
    assert [e.rule_id for e in window.take(0.0, BatchLimits(max_events=100))] == ["crew"] * 3
    window.discard(e.event_id for e in [ruled(o, "crew", 1) for o in range(3)])
    assert window.take(0.0, BatchLimits(max_events=100)) == []
    assert not window.has_due(0.0)  # nothing may go: the client does not spin on it
    gate.closed.clear()
    assert window.has_due(0.0)
    batch = window.take(0.0, BatchLimits(max_events=100))
    assert [e.source_position for e in batch] == [0, 1, 2, 3, 4]


def test_a_batch_is_not_topped_up_with_a_closed_rules_events() -> None:
    gate = Gate("noon")
    window = SendWindow(sendable=gate)
    # One partition whose events change rule part way (a rule replaced by another id).
    window.add([ruled(o, "crew") for o in range(2)]
               + [dataclasses.replace(ruled(o, "crew"), rule_id="noon") for o in range(2, 4)])
    assert [e.source_position for e in window.take(0.0, BatchLimits(max_events=100))] == [0, 1]


def test_a_held_rules_wait_counts_from_when_its_schedule_let_it_go() -> None:
    clock = ManualClock()
    gate = Gate("noon")
    ranks = {"noon": PriorityClass.BULK, "crew": PriorityClass.NORMAL}
    window = SendWindow(lambda e: ranks[e.rule_id or ""], monotonic=clock.monotonic,
                        sendable=gate)
    window.add([ruled(o, "noon", 0) for o in range(3)])
    clock.advance(2 * MAX_WAIT_SECONDS[PriorityClass.BULK])  # a night outside the schedule
    assert window.take(0.0, BatchLimits(max_events=1)) == []
    window.add([ruled(o, "crew", 1) for o in range(3)])
    gate.closed.clear()
    # Held all night, the BULK rule is not CRITICAL now: the NORMAL one still goes first.
    assert [e.rule_id for e in window.take(0.0, BatchLimits(max_events=1))] == ["crew"]


NIGHT = ScheduledRule("noon", TransferSchedule.parse("22:00-06:00"), PriorityClass.NORMAL)


def schedules(clock: ManualClock, *rules: ScheduledRule, zone: dt.tzinfo = dt.UTC
              ) -> SendSchedules:
    by_id = {item.rule_id: item for item in rules}
    return SendSchedules(lambda e: by_id.get(e.rule_id or ""), zone,
                         TrustedClock(clock, clock.monotonic, jump_seconds=300))


def at_hour(clock: ManualClock, hour: int) -> None:
    """Move both clocks forward to the next `hour`:00 UTC."""
    target = clock.now.replace(hour=hour, minute=0, second=0, microsecond=0)
    if target <= clock.now:
        target += dt.timedelta(days=1)
    clock.advance(target - clock.now)


def test_a_rule_is_open_inside_its_schedule_only_and_unscheduled_rules_always() -> None:
    clock = ManualClock()
    gate = schedules(clock, NIGHT)
    at_hour(clock, 12)
    assert not gate.open(ruled(1, "noon"))
    assert gate.open(ruled(1, "crew"))
    at_hour(clock, 23)
    assert gate.open(ruled(1, "noon"))


def test_schedules_are_read_in_the_nodes_zone() -> None:
    clock = ManualClock()
    # 22:00-06:00 in UTC+10 is 12:00-20:00 UTC.
    gate = schedules(clock, NIGHT, zone=dt.timezone(dt.timedelta(hours=10)))
    at_hour(clock, 13)
    assert gate.open(ruled(1, "noon"))
    at_hour(clock, 23)
    assert not gate.open(ruled(1, "noon"))


def test_a_jumped_system_clock_holds_bulk_rules_and_others_follow_trusted_time(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    bulk = ScheduledRule("logs", TransferSchedule.parse("00:00-24:00"), PriorityClass.BULK)
    gate = schedules(clock, NIGHT, bulk)
    at_hour(clock, 12)
    assert gate.open(ruled(1, "logs")) and not gate.open(ruled(1, "noon"))
    # Someone sets the system clock to 23:00: the monotonic clock did not move.
    clock.now += dt.timedelta(hours=11)
    clock.advance(2.0)
    with caplog.at_level(logging.WARNING, "tidesync.ship.send_schedule"):
        assert not gate.open(ruled(1, "logs"))  # BULK with a schedule: held
        assert not gate.open(ruled(1, "noon"))  # still noon by the trusted clock
    assert "the system clock is 39600 s off the last trusted time" in caplog.text
    assert gate.open(ruled(1, "crew"))  # no schedule: never held
    # The shore's answer says the system clock was right after all.
    gate.confirm(clock.now)
    assert gate.open(ruled(1, "logs")) and gate.open(ruled(1, "noon"))


def test_answers_are_kept_for_a_second() -> None:
    clock = ManualClock()
    asked: list[str] = []

    def rule_of(item: ChangeEvent) -> ScheduledRule:
        asked.append(item.rule_id or "")
        return NIGHT

    gate = SendSchedules(rule_of, dt.UTC, TrustedClock(clock, clock.monotonic, 300))
    at_hour(clock, 21)
    clock.now += dt.timedelta(minutes=59, seconds=59, microseconds=500_000)
    clock.seconds += 3599.5
    assert not gate.open(ruled(1, "noon"))
    clock.advance(0.6)  # 22:00:00.1, but within the second the answer is kept for
    assert not gate.open(ruled(2, "noon"))
    clock.advance(0.5)
    assert gate.open(ruled(3, "noon"))


def test_the_ships_rules_give_each_events_schedule(state: Any, tmp_path: Path) -> None:
    rules = ship_rules(state, tmp_path)
    rules.apply_config(config("cfg-1", rule(1, schedule="Mon-Fri 22:00-06:00",
                                            priority="HIGH")), dt.datetime.now(dt.UTC))
    change = dataclasses.replace(ruled(1, "crew"), rule_id="crew")
    scheduled = rules.schedule_of(change)
    assert scheduled is not None and scheduled.priority is PriorityClass.HIGH
    assert scheduled.schedule.text == "Mon-Fri 22:00-06:00"
    rows = dataclasses.replace(change, operation=Operation.SNAPSHOT, before=None)
    assert rules.schedule_of(rows).priority is PriorityClass.BULK  # type: ignore[union-attr]
    rules.apply_config(config("cfg-2", rule(2)), dt.datetime.now(dt.UTC))
    assert rules.schedule_of(change) is None  # the newest version has none


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Any]:
    from tidesync.ship.state import SQLiteShipState

    store = SQLiteShipState(tmp_path / "ship.sqlite", "ship-1", "group-1")
    yield store
    store.close()


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ShipClient]:
    built = offline_client(tmp_path, monkeypatch, node_id="ship-7", timezone="Asia/Kolkata")
    yield built
    built.close()


def test_the_client_holds_a_rule_outside_its_schedule_until_the_shores_time_opens_it(
        client: ShipClient) -> None:
    # A window in Kolkata time (UTC+05:30) that opens two to three hours from now (on the
    # hour), for two hours.
    local = dt.datetime.now(dt.UTC).astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30)))
    opens = local + dt.timedelta(hours=3)
    window = f"{opens:%H}:00-{(opens + dt.timedelta(hours=2)):%H}:00"
    assert client.rules is not None
    client.rules.apply_config(config("cfg-1", rule(1, rule_id="noon", source="fleet.noon",
                                                   schedule=window)), dt.datetime.now(dt.UTC))
    client.window.add([ruled(o, "noon") for o in range(3)] + [ruled(o, "items", 1)
                                                              for o in range(2)])
    assert {e.rule_id for e in client.window.take(0.0, BatchLimits())} == {"items"}
    # The shore's time (a heartbeat answer) is three and a half hours later than the ship's
    # clock: the ship trusts it, so the NORMAL rule's window is open now.
    shore = dt.datetime.now(dt.UTC) + dt.timedelta(hours=3, minutes=30)
    client._heartbeat_answered(pb.HeartbeatResponse(
        server_time_micros=int(shore.timestamp() * 1_000_000)))
    assert [e.source_position for e in client.window.take(0.0, BatchLimits())] == [0, 1, 2]


def test_the_heartbeat_tells_the_shore_the_nodes_zone(client: ShipClient) -> None:
    assert client.heartbeat_message().timezone == "Asia/Kolkata"

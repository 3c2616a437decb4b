"""A source_sequence gap stalled past its deadline asks the ship to resend, end to end: real
broker, real shore server and apply processor on PostgreSQL and MariaDB, the real ship client.

The shore is made to miss one event by deleting it from the inbox after the ship uploaded it
(the ship holds it RECEIVED, as after a shore restored from an older backup). The processor
applies what precedes the gap, holds the rest, and once the gap is older than the deadline
issues one RESEND command; the ship pulls it, uploads the partition again from the missing
sequence, acks COMMAND_APPLIED, and the shore applies the rest in order."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from tests.clocks import ManualClock
from tests.integration.ship_support import ItemsCapture, produce
from tests.integration.shore_support import migrated_pool, pg_rows, shore_apps
from tests.integration.test_ship_client import (
    committed_offsets,
    expected_rows,
    inbox,
    ship_config,
    shore_for_ship,
    shore_rows,
)
from tidesync.bootstrap.ship import build_client
from tidesync.bootstrap.target import mysql_target_applier
from tidesync.config import ShipTargetConfig, ShipTargetKind, TargetConfig
from tidesync.domain.change_event import ChangeEvent
from tidesync.domain.downlink_command import CommandKind, ResendPayload
from tidesync.localservices import PostgresDatabase
from tidesync.ship.client import ExitCode, ShipClient
from tidesync.shore.downlink import DownlinkService, open_downlink
from tidesync.shore.gap_resend import DownlinkGapResends
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.settings import ApplyConfig
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.contract import TargetApplier, TargetOutcome

pytestmark = pytest.mark.services

EVENTS = 8
MISSING = 4


def wait_until(condition: Callable[[], object], what: str) -> None:
    """Poll `condition` (a state, not a duration, is what the test waits for)."""
    for _ in range(3000):
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting: {what}")


class RecordingApplier:
    """The real shore applier; remembers the source sequences of every chunk it applied."""

    def __init__(self, inner: TargetApplier) -> None:
        self.inner = inner
        self.applied: list[int | None] = []

    def apply_chunk(self, events: Sequence[ChangeEvent]) -> list[TargetOutcome]:
        outcomes = self.inner.apply_chunk(events)
        self.applied += [e.source_sequence for e in events]
        return outcomes

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def drain(processor: ApplyProcessor) -> int:
    total = 0
    for _ in range(20):
        count = processor.run_once()
        if count == 0:
            return total
        total += count
    raise AssertionError("the processor did not go idle")


@pytest.fixture
def own_database() -> Iterator[PostgresDatabase]:
    """A database of its own: the processor here takes any partition with work."""
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()


def step_until(client: ShipClient, condition: Callable[[], object], what: str) -> None:
    wait_until(lambda: client.step() or condition(), what)


def resends(downlink: DownlinkService, node_id: str) -> list[tuple[Any, str | None]]:
    return [(c.payload, c.ack_result) for c in downlink.commands_for(node_id)
            if c.kind is CommandKind.RESEND]


def received(pool: Any, node_id: str) -> int:
    return pg_rows(pool, "SELECT count(*) FROM inbox_event WHERE origin_node_id = %s",
                   (node_id,))[0][0]


def test_a_stalled_gap_is_resent_by_the_ship_and_applied_in_order(
        own_database, shore_mariadb, kafka_broker, make_mariadb_database, tmp_path):
    database = make_mariadb_database(shore_mariadb)
    capture = ItemsCapture(database)
    kafka_broker.create_topic(capture.topic, partitions=1)
    produce(kafka_broker.bootstrap_servers,
            [capture.insert(k, f"part-{k}", k, "1.00") for k in range(1, EVENTS + 1)])
    target = TargetConfig(host=shore_mariadb.host, port=shore_mariadb.port,
                          user=shore_mariadb.user, password=shore_mariadb.password,
                          node_id="shore")
    with (shore_for_ship(own_database, shore_mariadb, database, worker=False) as shore,
          migrated_pool(own_database) as pool, shore_apps(own_database) as apps):
        downlink = open_downlink(own_database.eventsourcing_env(), own_database.dsn)
        applier = RecordingApplier(mysql_target_applier(target, lambda db, table: (db, table)))
        clock = ManualClock()
        processor = ApplyProcessor(
            apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool), applier, clock,
            ProcessorSettings(worker_id="w1", scope=ApplyConfig(gap_deadline_seconds=1)),
            draw=lambda: 0.5, resends=DownlinkGapResends(downlink))
        config = ship_config(shore, kafka_broker, tmp_path / "ship.sqlite",
                             commands_interval_seconds=1)
        client = build_client(config, ship_target=ShipTargetConfig(
            kind=ShipTargetKind.SQLITE, sqlite_path=str(tmp_path / "ship-business.sqlite")))
        try:
            run_scenario(client, processor, pool, downlink, shore.node_id, capture, clock)
            shore.start_worker()  # its views publish the receipts (nothing is left to apply)
            assert client.run(until_idle=True, timeout=60) is ExitCode.IDLE
            assert client.state.state_counts() == {"TERMINAL": EVENTS}
        finally:
            client.close()
            applier.close()
            downlink.close()
        assert applier.applied == list(range(1, EVENTS + 1))  # 1..3, then 4..8 in order
        assert [(row[2], row[3], row[4]) for row in inbox(own_database, shore.node_id)] == [
            (k, "TERMINAL", "APPLIED") for k in range(1, EVENTS + 1)]
        assert shore_rows(shore_mariadb, database) == expected_rows(capture)
    assert committed_offsets(kafka_broker, config.group_id, capture.topic, 1) == [EVENTS]


def run_scenario(client: ShipClient, processor: ApplyProcessor, pool: Any,
                 downlink: DownlinkService, node_id: str, capture: ItemsCapture,
                 clock: ManualClock) -> None:
    # Every event reaches the shore; then the shore loses one of them.
    step_until(client, lambda: client.state.state_counts().get("RECEIVED") == EVENTS,
               "every event received")
    pg_rows(pool, "DELETE FROM inbox_event WHERE origin_node_id = %s AND source_sequence = %s"
                  " RETURNING 1", (node_id, MISSING))

    assert drain(processor) == MISSING - 1
    assert resends(downlink, node_id) == []  # a gap younger than its deadline only waits
    clock.advance(5)
    assert drain(processor) == 0
    request = ResendPayload(capture.topic, 0, 0, MISSING)
    assert resends(downlink, node_id) == [(request, None)]
    clock.advance(5)
    assert drain(processor) == 0  # still stalled: the same command, not a second one
    assert resends(downlink, node_id) == [(request, None)]

    # The ship pulls the request, uploads the partition again from the missing sequence on
    # and acks it; then the shore applies the rest.
    step_until(client, lambda: resends(downlink, node_id) == [(request, "COMMAND_APPLIED")]
               and received(pool, node_id) == EVENTS,
               "the request answered and the missing event received")
    clock.advance(5)
    assert drain(processor) == EVENTS - MISSING + 1

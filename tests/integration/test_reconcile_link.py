"""Reconciliation over the link, on real services: the shore's server and PostgreSQL, a shore
and a ship MariaDB, the ship's downlink loop pulling RECONCILE commands over HTTP and posting
its answers. Equal tables end EQUAL in 2 messages; a few differing keys end DIFFERENT with
exactly those keys; a repair sends them (rows only the shore holds as ROW_CHANGE commands the
ship applies, the others as a snapshot request queued on the ship) and a second exchange finds
none; the schedule starts one exchange per interval; the console shows the sentinel, keys
only to a role that may see evidence values.

The ship's capture, queue and upload are not run: the rows the ship's snapshot would send are
applied on the shore as SNAPSHOT events by the shore's own applier, as the apply worker does
with snapshot records (the capture's snapshot is tested in test_capture_snapshot)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from tests.integration.console_support import console_world, data
from tests.integration.shore_support import run_sql
from tests.integration.test_reconcile_mysql import ROWS, _mariadb
from tests.integration.test_ship_client import shore_for_ship
from tidesync.bootstrap.business_db import business_connection
from tidesync.capture.snapshot_store import SnapshotStore
from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.domain.downlink_command import CommandKind
from tidesync.domain.node import NodeProfile, secret_from_text
from tidesync.domain.rules.release import ReleaseStatus
from tidesync.domain.rules.sync_rule import Direction, Selector, SyncRule
from tidesync.localservices import MariaDBInstance
from tidesync.ship.downlink import Downlink, DownlinkSettings
from tidesync.ship.reconcile import ShipReconciler
from tidesync.ship.remote_apply import RemoteApplier
from tidesync.ship.state import SQLiteShipState
from tidesync.ship.transport import HttpShoreLink, RetrySchedule
from tidesync.shore.downlink import open_downlink
from tidesync.shore.reconcile_link import ExchangeStore, ReconcileLink, keys_from_json
from tidesync.shore.reconcile_repair import ReconcileSchedule, repair, table_subject
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.settings import TargetConfig

pytestmark = pytest.mark.services

SHIP_ONLY = [(7, "ship-only-a", 1), (7, "ship-only-b", 2)]
SHORE_ONLY = [(8, "shore-only-a", 3), (8, "shore-only-b", 4)]
CHANGED = ROWS[10]
SENTINEL = """query($node: String!) { reconcileResults(nodeId: $node) { items {
  subject state differingCount messages linkBytes seconds differingKeys } } }"""


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime.now(dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


class Ship:
    """The ship's downlink loop over HTTP, answering with its MariaDB table."""

    def __init__(self, shore: Any, instance: MariaDBInstance, database: str,
                 tmp_path: Path) -> None:
        self.state = SQLiteShipState(tmp_path / "ship.sqlite", shore.node_id, "group")
        self.http = HttpShoreLink(shore.url, shore.node_id, secret_from_text(shore.secret_text),
                                  clock=lambda: dt.datetime.now(dt.UTC), timeout=10.0)
        self.target = MySQLTargetApplier(host=instance.host, port=instance.port,
                                         user=instance.user, password=instance.password,
                                         node_id="node")
        self.downlink = Downlink(
            DownlinkSettings(node_id=shore.node_id, page_size=50), self.state, self.http,
            RemoteApplier(self.target, "node"), set_health=lambda *args: None,
            link_failed=lambda schedule, error, what: schedule.failed(0.0),
            retry=RetrySchedule())
        self.snapshots = SnapshotStore(tmp_path / "capture.sqlite")
        self.downlink.reconciler = ShipReconciler(
            shore.node_id, business_connection(_target(instance, database)), self.http,
            lambda db, table, keys, actor, reason: self.snapshots.request(
                "cdc.ship", db, table, keys=list(keys), chunk_rows=100, reason=reason,
                actor=actor, now=dt.datetime.now(dt.UTC)))

    def turn(self) -> None:
        self.downlink.retry.succeeded()
        self.downlink.next_pull = 0.0
        self.downlink.step()

    def close(self) -> None:
        self.target.close()
        self.http.close()
        self.snapshots.close()
        self.state.close()


def _target(instance: MariaDBInstance, database: str) -> TargetConfig:
    return TargetConfig(host=instance.host, port=instance.port, user=instance.user,
                        password=instance.password, database=database)


def converse(link: ReconcileLink, ship: Ship, exchange_id: uuid.UUID) -> Any:
    """Ship turns and shore take-ups until the exchange ends."""
    for _ in range(40):
        ship.turn()
        link.advance()
        row = link.store.exchange(exchange_id)
        if row is not None and row.state != "RUNNING":
            return row
    raise AssertionError("the exchange did not end")


class OneRule:
    def __init__(self, rule: SyncRule) -> None:
        self.rule = rule

    def offered(self) -> list[tuple[SyncRule, ReleaseStatus]]:
        return [(self.rule, ReleaseStatus.ACTIVE)]


@pytest.fixture
def world(ship_mariadb: MariaDBInstance, shore_mariadb: MariaDBInstance,
          make_mariadb_database: Callable[[MariaDBInstance], str], tmp_path: Path
          ) -> Iterator[tuple[Any, ...]]:
    ship_db, shore_db = make_mariadb_database(ship_mariadb), make_mariadb_database(shore_mariadb)
    _mariadb(ship_mariadb, ship_db, ROWS)
    _mariadb(shore_mariadb, shore_db, ROWS)
    with console_world(shore_mariadb) as console, \
            shore_for_ship(console.database, shore_mariadb,
                           make_mariadb_database(shore_mariadb), worker=False) as shore:
        pool = ConnectionPool(console.database.dsn, min_size=1, max_size=2, open=True)
        downlink = open_downlink(console.database.eventsourcing_env(), console.database.dsn)
        clock = Clock()
        link = ReconcileLink(ExchangeStore(pool), downlink,
                             business_connection(_target(shore_mariadb, shore_db)), clock)
        ship = Ship(shore, ship_mariadb, ship_db, tmp_path)
        try:
            yield console, shore, link, ship, clock, ship_db, shore_db
        finally:
            ship.close()
            downlink.close()
            pool.close()


def test_reconcile_over_the_link_finds_repairs_and_schedules(world, ship_mariadb,
                                                            shore_mariadb):
    console, shore, link, ship, clock, ship_db, shore_db = world
    subject = table_subject(f"{shore_db}.stock", f"{ship_db}.stock")
    node = shore.node_id

    equal = converse(link, ship, link.start(node, subject, "user:ann", "onboarding check"))
    assert (equal.state, equal.messages, equal.differing_count) == ("EQUAL", 2, 0)
    assert 0 < equal.link_bytes < 1000

    # The ship gains two rows and changes one; the shore gains two rows of its own.
    for site, item, qty in SHIP_ONLY:
        run_sql(ship_mariadb, ship_db, f"INSERT INTO stock VALUES ({site}, '{item}', {qty})")
    run_sql(ship_mariadb, ship_db, f"UPDATE stock SET qty = qty + 1 WHERE site = {CHANGED[0]}"
                                   f" AND item = '{CHANGED[1]}'")
    for site, item, qty in SHORE_ONLY:
        run_sql(shore_mariadb, shore_db, f"INSERT INTO stock VALUES ({site}, '{item}', {qty})")
    different = converse(link, ship, link.start(node, subject, "user:ann", "after edits"))
    expected = {(r[0], r[1]) for r in [*SHIP_ONLY, *SHORE_ONLY, CHANGED]}
    assert different.state == "DIFFERENT" and different.differing_count == len(expected)
    assert set(keys_from_json(different.differing_keys)) == expected
    assert set(keys_from_json(different.shore_only_keys)) == {
        (r[0], r[1]) for r in SHORE_ONLY}

    # The console: every role sees the result, only evidence readers its keys.
    seen = data(console.query(SENTINEL, {"node": node}, role="operator"))
    (shown,) = seen["reconcileResults"]["items"]
    assert (shown["state"], shown["differingCount"], shown["differingKeys"]) == (
        "DIFFERENT", len(expected), None)
    audited = data(console.query(SENTINEL, {"node": node}, role="auditor"))
    assert len(audited["reconcileResults"]["items"][0]["differingKeys"]) == len(expected)

    sent = repair(link, different.exchange_id, "user:ann", "copy the differing rows")
    assert (sent.snapshot_keys, sent.row_changes) == (3, 2)
    for _ in range(3):
        ship.turn()
    (request,) = ship.snapshots.requests()
    assert {tuple(key) for key in request.keys or []} == {
        (r[0], r[1]) for r in [*SHIP_ONLY, CHANGED]}
    apply_as_snapshot(shore_mariadb, shore_db, ship_mariadb, ship_db, request.keys or [])

    again = converse(link, ship, link.start(node, subject, "user:ann", "after repair"))
    assert (again.state, again.differing_count) == ("EQUAL", 0)

    run_schedule(link, ship, clock, node, ship_db, shore_db)


def run_schedule(link: ReconcileLink, ship: Ship, clock: Clock, node: str, ship_db: str,
                 shore_db: str) -> None:
    rule = SyncRule(rule_id="stock", source_database=ship_db, source_table="stock",
                    target_database=shore_db, direction=Direction.BIDIRECTIONAL,
                    selector=Selector(nodes=frozenset({"*"})), key_columns=("site", "item"))
    schedule = ReconcileSchedule(link, OneRule(rule),  # type: ignore[arg-type]
                                 lambda: {node: NodeProfile()}, 60, clock)
    assert schedule.run_once() == 1
    assert schedule.run_once() == 0  # one runs already
    (first,) = [r for r in link.store.sentinel(node) if r.subject == "rule:stock"]
    assert converse(link, ship, first.exchange_id).state == "EQUAL"
    clock.now += dt.timedelta(seconds=30)
    assert schedule.run_once() == 0  # the last one began less than an interval ago
    clock.now += dt.timedelta(seconds=31)
    assert schedule.run_once() == 1
    started = link.store.query("SELECT count(*) AS n FROM reconcile_exchange WHERE node_id = %s"
                               " AND subject = 'rule:stock'", (node,))
    assert started[0]["n"] == 2


def apply_as_snapshot(shore: MariaDBInstance, shore_db: str, ship: MariaDBInstance,
                      ship_db: str, keys: list[Any]) -> None:
    """What the shore does with the ship's snapshot records of these keys."""
    applier = MySQLTargetApplier(host=shore.host, port=shore.port, user=shore.user,
                                 password=shore.password, node_id="shore",
                                 route=lambda db, table: (shore_db, table))
    try:
        events = []
        for number, (site, item) in enumerate(keys):
            (row,) = run_sql(ship, ship_db, "SELECT qty, _sync_revision FROM stock"
                                            f" WHERE site = {site} AND item = '{item}'")
            events.append(ChangeEvent(
                uuid.uuid4(), "node", "test", "snapshot", 0, number,
                RecordKey.of(ship_db, "stock", {"site": site, "item": item}),
                Operation.SNAPSHOT, dt.datetime.now(dt.UTC),
                after={"site": site, "item": item, "qty": row[0]},
                result_revision=Revision.parse(row[1])))
        outcomes = applier.apply_chunk(events)
        assert {outcome.kind.value for outcome in outcomes} == {"APPLIED"}
    finally:
        applier.close()


def _heard_from(link: ReconcileLink, node: str, at: dt.datetime) -> None:
    """A heartbeat of the node, received by the shore at `at`."""
    link.store.execute(
        "INSERT INTO node_heartbeat (node_id, received_at, sent_at, protocol_version,"
        " client_version, active_config_version, health) VALUES (%s, %s, %s, '1.0', '0.1.0',"
        " '', '[]') ON CONFLICT (node_id) DO UPDATE SET received_at = EXCLUDED.received_at,"
        " sent_at = EXCLUDED.sent_at", (node, at, at))


def test_an_exchange_whose_ship_stays_silent_times_out(world):
    console, shore, link, ship, clock, ship_db, shore_db = world
    link.answer_timeout = dt.timedelta(hours=1)
    subject = table_subject(f"{shore_db}.stock", f"{ship_db}.stock")
    node = shore.node_id
    _heard_from(link, node, clock.now - dt.timedelta(minutes=1))  # before the turn
    exchange_id = link.start(node, subject, "user:ann", "check a silent ship")

    # Offline for days: time before the ship is heard from again does not count.
    clock.now += dt.timedelta(days=3)
    assert link.advance() == 0
    _heard_from(link, node, clock.now)
    link.advance()
    clock.now += dt.timedelta(minutes=59)
    link.advance()
    row = link.store.exchange(exchange_id)
    assert row is not None and row.state == "RUNNING"

    clock.now += dt.timedelta(minutes=2)
    assert link.advance() == 1
    row = link.store.exchange(exchange_id)
    assert row is not None
    assert (row.state, row.ended_at) == ("TIMED_OUT", clock.now)
    assert "did not answer round 1" in row.error
    (shown,) = data(console.query(SENTINEL, {"node": node}, role="operator"))[
        "reconcileResults"]["items"]
    assert shown["state"] == "TIMED_OUT"
    assert [r.state for r in link.store.sentinel(node)] == ["TIMED_OUT"]

    # The late answer changes nothing; a new exchange may start and ends normally.
    ship.turn()
    link.advance()
    assert link.store.exchange(exchange_id).state == "TIMED_OUT"  # type: ignore[union-attr]
    again = converse(link, ship, link.start(node, subject, "user:ann", "after the timeout"))
    assert again.state == "EQUAL"


def test_a_repair_sends_rows_only_the_shore_holds_as_the_downlink_sends_them(
        world, shore_mariadb):
    from tidesync.domain.rules.transforms import TransformSpec
    from tidesync.shore.downlink_rules import DownlinkRoutes
    from tidesync.shore.reconcile_repair import rule_subject

    _console, shore, link, ship, clock, ship_db, shore_db = world
    node = shore.node_id
    rule = SyncRule(rule_id="stock", source_database=ship_db, source_table="stock",
                    target_database=shore_db, direction=Direction.BIDIRECTIONAL,
                    selector=Selector(nodes=frozenset({"*"})), key_columns=("site", "item"),
                    transforms=(TransformSpec("qty", "scale", 1, {"factor": "10"}),),
                    version=3)
    site, item, qty = SHORE_ONLY[0]
    run_sql(shore_mariadb, shore_db, f"INSERT INTO stock VALUES ({site}, '{item}', {qty})")
    different = converse(link, ship, link.start(node, rule_subject(rule), "user:ann",
                                                "before repair"))
    assert set(keys_from_json(different.shore_only_keys)) == {(site, item)}

    sent = repair(link, different.exchange_id, "user:ann", "copy the shore's row", "shore",
                  [rule])
    assert (sent.snapshot_keys, sent.row_changes) == (0, 1)
    (command,) = [c for c in link.downlink.commands_for(node)
                  if c.kind is CommandKind.ROW_CHANGE]
    (revision,) = run_sql(shore_mariadb, shore_db, "SELECT _sync_revision FROM stock"
                                                   f" WHERE site = {site} AND item = '{item}'")
    shore_change = ChangeEvent(
        command.payload.origin_event_id, "shore", "shore-cdc", "shore", 0, 0,
        RecordKey.of(shore_db, "stock", {"site": site, "item": item}), Operation.INSERT,
        clock.now, after={"site": site, "item": item, "qty": qty},
        result_revision=Revision.parse(revision[0]))
    routed = DownlinkRoutes.of([rule], {node: NodeProfile()}).route(shore_change, "shore")
    assert command.payload == routed.payloads[node]
    assert (command.payload.rule_id, command.payload.rule_version) == ("stock", 3)
    # As on the downlink, a rule's transforms shape what leaves a ship, not the shore's rows.
    assert dict(command.payload.values or {}) == {"qty": qty}

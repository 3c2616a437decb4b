"""Applying tables related by foreign keys on the real shore (PostgreSQL + MariaDB): a child
that arrives before its parent waits and applies once the parent is there, a source
transaction is one target transaction, a change the source made with foreign key checks off
is applied with them off (a cycle applies), and a violation that never resolves ends REJECTED
after the wait."""

from __future__ import annotations

import datetime as dt
import itertools
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import pytest

from tests.clocks import ManualClock
from tests.integration.shore_support import (
    inbox_states,
    migrated_pool,
    new_revision,
    pg_rows,
    receive,
    shore_apps,
)
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    SourceCoordinates,
    event_id_for,
)
from tidesync.localservices import PostgresDatabase
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.settings import ApplyConfig
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

SHORE_NODE = "shore"
DDL = (
    "CREATE TABLE parent (id INT PRIMARY KEY, note VARCHAR(20) NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT NOT NULL,"
    " FOREIGN KEY (parent_id) REFERENCES parent (id)) ENGINE=InnoDB",
    # A cycle, as Sakila's store and staff: each refers to the other.
    "CREATE TABLE store (id INT PRIMARY KEY, manager_id INT NOT NULL) ENGINE=InnoDB",
    "CREATE TABLE staff (id INT PRIMARY KEY, store_id INT NOT NULL,"
    " FOREIGN KEY (store_id) REFERENCES store (id)) ENGINE=InnoDB",
    "ALTER TABLE store ADD FOREIGN KEY (manager_id) REFERENCES staff (id)",
)
TABLES = ("parent", "child", "store", "staff")


@dataclass
class Topic:
    """Change events of one source partition, as a ship would send them."""

    node_id: str
    name: str
    offsets: Iterator[int] = field(default_factory=lambda: itertools.count(0))
    sequence: int = 0

    def insert(self, table: str, row: dict[str, object], *, transaction: str | None = None,
               order: int | None = None, fk_checks: bool = True) -> ChangeEvent:
        offset = next(self.offsets)
        self.sequence += 1
        record = RecordKey.of("shipdb", table, {"id": row["id"]})
        event_id = event_id_for(SourceCoordinates(self.node_id, 0, self.name, 0, offset),
                                record, Operation.INSERT)
        return ChangeEvent(
            event_id=event_id, origin_node_id=self.node_id, source_connector_id="test",
            source_topic=self.name, source_partition=0, source_position=offset, record=record,
            operation=Operation.INSERT, captured_at=dt.datetime.now(dt.UTC), before=None,
            after=row, base_revision=None, result_revision=new_revision(),
            source_sequence=self.sequence, transaction_id=transaction, transaction_order=order,
            source_details=MappingProxyType({} if fk_checks else {"fk_checks": False}))


@pytest.fixture
def target(shore_mariadb, make_mariadb_database) -> Iterator[tuple[str, Any]]:
    name = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=name, autocommit=True)
    with conn.cursor() as cursor:
        for statement in DDL:
            cursor.execute(statement)
    for table in TABLES:
        enable_mysql_table(conn, name, table, SHORE_NODE)
    yield name, conn
    conn.close()


@pytest.fixture
def shore():
    """A database of its own: these tests leave events waiting, which no other test's worker
    may claim."""
    database = PostgresDatabase().create()
    try:
        with migrated_pool(database) as pool, shore_apps(database) as apps:
            yield pool, apps
    finally:
        database.drop()


def processor(shore, instance, database: str, clock: ManualClock, **settings: Any
              ) -> ApplyProcessor:
    pool, apps = shore
    applier = MySQLTargetApplier(host=instance.host, port=instance.port, user=instance.user,
                                 password=instance.password, node_id=SHORE_NODE,
                                 route=lambda db, table: (database, table))
    scope = ApplyConfig(fk_wait_seconds=settings.pop("fk_wait_seconds", 600))
    return ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool), applier,
                          clock, ProcessorSettings(worker_id="w1", scope=scope, **settings),
                          draw=lambda: 0.5)


def drain(worker: ApplyProcessor, limit: int = 50) -> int:
    total = 0
    for _ in range(limit):
        count = worker.run_once()
        if count == 0:
            return total
        total += count
    return total


def ids(conn: Any, table: str) -> set[int]:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {table}")
        return {row[0] for row in cursor.fetchall()}


def node() -> str:
    return f"ship-{secrets.token_hex(3)}"


def states(pool: Any, node_id: str, events: list[ChangeEvent]) -> list[tuple[str, str | None]]:
    """(state, reason code) of each event in the work index."""
    found = dict((row[0], (row[1], row[2])) for row in pg_rows(
        pool, "SELECT event_id, state, reason_code FROM inbox_event WHERE origin_node_id = %s",
        (node_id,)))
    return [found[event.event_id] for event in events]


def results(pool: Any, node_id: str, events: list[ChangeEvent]) -> list[tuple[str, str | None]]:
    """(state, result) of each event."""
    found = inbox_states(pool, node_id)
    return [found[event.event_id] for event in events]


def test_a_child_ahead_of_its_parent_waits_then_applies(shore, target, shore_mariadb):
    database, conn = target
    ship = node()
    children = Topic(ship, "sync.cdc.s.shipdb.child")
    parents = Topic(ship, "sync.cdc.s.shipdb.parent")
    child = children.insert("child", {"id": 10, "parent_id": 1})
    receive(shore[0], ship, [child])
    clock = ManualClock()
    worker = processor(shore, shore_mariadb, database, clock)

    assert drain(worker) == 0
    assert states(shore[0], ship, [child]) == [("PENDING", "FK_WAITING")]

    parent = parents.insert("parent", {"id": 1, "note": "p1"})
    receive(shore[0], ship, [parent])
    clock.advance(60)
    assert drain(worker) == 2
    assert ids(conn, "child") == {10} and ids(conn, "parent") == {1}
    assert results(shore[0], ship, [child, parent]) == [("TERMINAL", "APPLIED")] * 2
    assert pg_rows(shore[0], "SELECT DISTINCT fk_wait_since FROM apply_partition"
                             " WHERE origin_node_id = %s", (ship,)) == [(None,)]
    with conn.cursor() as cursor:  # the shore keeps its foreign keys
        cursor.execute("SELECT @@foreign_key_checks")
        assert cursor.fetchone()[0] == 1


def test_a_violation_that_never_resolves_is_rejected_after_the_wait(shore, target,
                                                                      shore_mariadb):
    database, conn = target
    ship = node()
    topic = Topic(ship, "sync.cdc.s.shipdb")
    parent = topic.insert("parent", {"id": 1, "note": "p1"})
    orphan = topic.insert("child", {"id": 10, "parent_id": 99})
    behind = topic.insert("child", {"id": 11, "parent_id": 1})
    receive(shore[0], ship, [parent, orphan, behind])
    clock = ManualClock()
    worker = processor(shore, shore_mariadb, database, clock, fk_wait_seconds=300)

    assert drain(worker) == 1  # the parent: what precedes the orphan need not wait
    # The partition keeps its order: the event behind the orphan waits with it.
    assert states(shore[0], ship, [orphan, behind]) == [("PENDING", "FK_WAITING")] * 2
    assert ids(conn, "child") == set()
    clock.advance(200)
    assert drain(worker) == 0
    assert ids(conn, "child") == set()

    clock.advance(200)
    assert drain(worker) == 2
    assert results(shore[0], ship, [orphan, behind]) == [
        ("TERMINAL", "REJECTED"), ("TERMINAL", "APPLIED")]
    assert states(shore[0], ship, [orphan])[0] == ("TERMINAL", "CONSTRAINT_VIOLATION")
    assert ids(conn, "child") == {11} and ids(conn, "parent") == {1}


def test_a_source_transaction_is_one_target_transaction(shore, target, shore_mariadb):
    database, conn = target
    ship = node()
    topic = Topic(ship, "sync.cdc.s.shipdb")
    transaction = f"0-1-{uuid.uuid4().int % 1000}"
    events = [topic.insert("parent", {"id": 1, "note": "p1"}, transaction=transaction, order=1),
              topic.insert("child", {"id": 10, "parent_id": 1}, transaction=transaction,
                           order=2),
              topic.insert("child", {"id": 11, "parent_id": 2}, transaction=transaction,
                           order=3)]
    receive(shore[0], ship, events)
    clock = ManualClock()
    # Chunks of two events: without transactions, the first two would commit on their own.
    worker = processor(shore, shore_mariadb, database, clock, chunk_size=2)

    drain(worker)
    assert ids(conn, "parent") == set() and ids(conn, "child") == set()
    assert {state for state in states(shore[0], ship, events)} == {("PENDING", "FK_WAITING")}

    late = Topic(ship, "sync.cdc.s.shipdb.late").insert("parent", {"id": 2, "note": "p2"})
    receive(shore[0], ship, [late])
    clock.advance(60)
    assert drain(worker) == 4
    assert ids(conn, "parent") == {1, 2} and ids(conn, "child") == {10, 11}


def test_a_full_claim_leaves_a_transaction_it_cuts_to_the_next_claim(shore, target,
                                                                      shore_mariadb):
    database, conn = target
    ship = node()
    topic = Topic(ship, "sync.cdc.s.shipdb")
    events = [topic.insert("parent", {"id": 1, "note": "p1"}, transaction="t1", order=1),
              topic.insert("parent", {"id": 2, "note": "p2"}, transaction="t2", order=1),
              topic.insert("child", {"id": 20, "parent_id": 2}, transaction="t2", order=2),
              topic.insert("child", {"id": 21, "parent_id": 2}, transaction="t2", order=3)]
    receive(shore[0], ship, events)
    worker = processor(shore, shore_mariadb, database, ManualClock(), max_events_per_job=3)

    assert worker.run_once() == 1  # t1 only: t2 may go on past the claim's three events
    assert ids(conn, "parent") == {1}
    assert worker.run_once() == 3  # t2 whole
    assert ids(conn, "parent") == {1, 2} and ids(conn, "child") == {20, 21}


def test_changes_made_with_foreign_key_checks_off_apply_with_them_off(shore, target,
                                                                      shore_mariadb):
    database, conn = target
    ship = node()
    topic = Topic(ship, "sync.cdc.s.shipdb")
    # The cycle as a dump loads it: store 1 names manager 5 before staff 5 exists.
    loaded = [topic.insert("store", {"id": 1, "manager_id": 5}, fk_checks=False),
              topic.insert("staff", {"id": 5, "store_id": 1}, fk_checks=False)]
    # Then a change made with the checks on, which breaks a foreign key on the target too.
    checked = topic.insert("child", {"id": 30, "parent_id": 3})
    receive(shore[0], ship, [*loaded, checked])
    worker = processor(shore, shore_mariadb, database, ManualClock())

    assert drain(worker) == 2
    assert ids(conn, "store") == {1} and ids(conn, "staff") == {5}
    # The session's checks were on again for the next change: it waits for its parent.
    assert states(shore[0], ship, [checked]) == [("PENDING", "FK_WAITING")]
    assert ids(conn, "child") == set()

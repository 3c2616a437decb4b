"""Poison events through the apply processor on real PostgreSQL and MariaDB (issue 13, item 1):
values and names no target can take, database errors nobody mapped, and faults inside a chunk
end one event REJECTED or the chunk DEAD, never the worker; operators replay or skip them."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest

from tests.clocks import ManualClock
from tests.integration.projection_support import read_side
from tests.integration.shore_support import (
    ITEMS_DDL,
    ShipLog,
    inbox_states,
    migrated_pool,
    pg_rows,
    receive,
    shore_apps,
    use_event_store,
)
from tests.integration.test_apply_processor import drain, items, make_applier, node
from tidesync.apps.jobs import ReplayRefused, replay, replay_event, skip_event
from tidesync.domain.apply_job import ErrorClass
from tidesync.domain.backoff import Backoff
from tidesync.domain.change_event import ChangeEvent, Operation
from tidesync.entrypoints.cli import main
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

SHORE_NODE = "shore"


@pytest.fixture
def target_db(shore_mariadb, make_mariadb_database):
    name = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=name, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
        cursor.execute("ALTER TABLE items ADD COLUMN total DECIMAL(12,2)"
                       " AS (qty * price) PERSISTENT")
    enable_mysql_table(conn, name, "items", SHORE_NODE)
    yield name, conn
    conn.close()


@pytest.fixture
def shore(pg_database):
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps:
        yield pool, apps


def processor_for(shore, applier, clock=None, **settings) -> ApplyProcessor:
    pool, apps = shore
    return ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool), applier,
                          clock or ManualClock(), ProcessorSettings(worker_id="w1", **settings),
                          draw=lambda: 0.5)


def raw_insert(ship: ShipLog, key: int, row: dict[str, object]) -> ChangeEvent:
    """An INSERT whose after image is exactly `row` (the ship log's helpers build valid ones)."""
    revision = ship.insert(key, "x", 1, "1.00").result_revision
    ship.sequence -= 1  # that helper event is never sent: keep the sequence contiguous
    return ship._event(Operation.INSERT, key, None, {"id": key, **row}, None, revision)


def reasons(pool, events: list[ChangeEvent]) -> list[tuple[str, str | None, str | None]]:
    found = dict((row[0], row[1:]) for row in pg_rows(
        pool, "SELECT event_id, state, result, reason_code FROM inbox_event"
              " WHERE event_id = ANY(%s)", ([e.event_id for e in events],)))
    return [found[e.event_id] for e in events]


GOOD = {"name": "ok", "qty": 2, "price": Decimal("1.50")}


@pytest.mark.parametrize(("change", "reason"), [
    ({"price": Decimal("NaN")}, "INVALID_VALUE"),
    ({"price": Decimal("sNaN")}, "INVALID_VALUE"),
    ({"price": Decimal("Infinity")}, "INVALID_VALUE"),
    ({"price": Decimal("1E+999999999")}, "VALUE_OUT_OF_RANGE"),
    ({"price": Decimal("1E-999999999")}, "VALUE_OUT_OF_RANGE"),
    ({"price": Decimal("1" * 70)}, "VALUE_OUT_OF_RANGE"),
    ({"_SYNC_REVISION": "not-a-revision"}, "METADATA_COLUMN"),
    ({"_sync_ORIGIN": "shore"}, "METADATA_COLUMN"),
    ({"QTY": 3}, "DUPLICATE_COLUMN"),
    ({"na\x00me": "x"}, "INVALID_NAME"),
])
def test_values_and_names_no_target_can_take_reject_only_their_event(
        shore, target_db, shore_mariadb, change, reason):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    poison = raw_insert(ship, 10, {**GOOD, **change})
    fine = raw_insert(ship, 20, GOOD)
    receive(shore[0], ship.node_id, [poison, fine])

    assert drain(processor_for(shore, make_applier(shore_mariadb, database))) == 2

    assert reasons(shore[0], [poison, fine]) == [
        ("TERMINAL", "REJECTED", reason), ("TERMINAL", "APPLIED", None)]
    assert set(items(conn)) == {20}


def test_a_generated_column_in_the_image_is_left_to_the_database(shore, target_db,
                                                                 shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    event = raw_insert(ship, 1, {"name": "n", "qty": 3, "price": Decimal("2.00"),
                                 "TOTAL": Decimal("999.00")})
    receive(shore[0], ship.node_id, [event])

    drain(processor_for(shore, make_applier(shore_mariadb, database)))

    assert reasons(shore[0], [event]) == [("TERMINAL", "APPLIED", None)]
    with conn.cursor() as cursor:
        cursor.execute("SELECT total FROM items WHERE id = 1")
        assert cursor.fetchone() == (Decimal("6.00"),)


def test_a_database_error_nobody_mapped_rejects_only_that_event(shore, target_db,
                                                                shore_mariadb):
    database, conn = target_db
    with conn.cursor() as cursor:  # MariaDB answers SIGNAL with error 1644, in no table of ours
        cursor.execute("CREATE TRIGGER refuse_poison BEFORE INSERT ON items FOR EACH ROW"
                       " IF NEW.name = 'poison' THEN"
                       " SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'; END IF")
    ship = ShipLog(node(), "shipdb")
    first, refused, last = (ship.insert(1, "a", 1, "1.00"), ship.insert(2, "poison", 1, "1.00"),
                            ship.insert(3, "c", 1, "1.00"))
    receive(shore[0], ship.node_id, [first, refused, last])

    assert drain(processor_for(shore, make_applier(shore_mariadb, database))) == 3

    assert reasons(shore[0], [first, refused, last]) == [
        ("TERMINAL", "APPLIED", None), ("TERMINAL", "REJECTED", "DATABASE_REFUSED"),
        ("TERMINAL", "APPLIED", None)]
    assert set(items(conn)) == {1, 3}


def test_a_statement_over_the_packet_limit_rejects_only_that_event(shore, target_db,
                                                                   shore_mariadb):
    database, conn = target_db
    with conn.cursor() as cursor:
        cursor.execute("ALTER TABLE items MODIFY name LONGTEXT NOT NULL")
        cursor.execute("SELECT @@max_allowed_packet")
        limit = int(cursor.fetchone()[0])
    ship = ShipLog(node(), "shipdb")
    huge = ship.insert(1, "x" * (limit + 10), 1, "1.00")
    small = ship.insert(2, "small", 1, "1.00")
    receive(shore[0], ship.node_id, [huge, small])

    assert drain(processor_for(shore, make_applier(shore_mariadb, database))) == 2

    assert reasons(shore[0], [huge, small]) == [
        ("TERMINAL", "REJECTED", "PACKET_TOO_LARGE"), ("TERMINAL", "APPLIED", None)]


def test_statements_too_large_for_one_packet_together_go_one_by_one(shore, target_db,
                                                                     shore_mariadb):
    database, conn = target_db
    with conn.cursor() as cursor:
        cursor.execute("ALTER TABLE items MODIFY name LONGTEXT NOT NULL")
        cursor.execute("SELECT @@max_allowed_packet")
        limit = int(cursor.fetchone()[0])
    ship = ShipLog(node(), "shipdb")
    receive(shore[0], ship.node_id, [ship.insert(1, "a", 1, "1.00"),
                                     ship.insert(2, "b", 1, "1.00")])
    processor = processor_for(shore, make_applier(shore_mariadb, database))
    drain(processor)
    updates = [ship.update(1, name="x" * (limit * 2 // 3)),
               ship.update(2, name="y" * (limit * 2 // 3))]
    inserts = [ship.insert(3, "z" * (limit * 2 // 3), 1, "1.00"),
               ship.insert(4, "w" * (limit * 2 // 3), 1, "1.00")]
    receive(shore[0], ship.node_id, [*updates, *inserts])

    assert drain(processor) == 4

    assert reasons(shore[0], [*updates, *inserts]) == [("TERMINAL", "APPLIED", None)] * 4
    assert {key: len(row[0]) for key, row in items(conn).items()} == {
        key: limit * 2 // 3 for key in (1, 2, 3, 4)}


class FaultyApplier:
    """A MySQL applier with a bug that fires on one row (a mock: a real fault of this kind is
    what the test guards against, and none is known to remain)."""

    def __init__(self, inner, poison_key: int) -> None:
        self.inner = inner
        self.poison_key = poison_key

    def apply_chunk(self, events):
        if any(e.primary_key["id"] == self.poison_key for e in events):
            raise RuntimeError("a bug")
        return self.inner.apply_chunk(events)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_fault_inside_a_chunk_retries_then_goes_dead_and_an_operator_skips_it(
        shore, target_db, shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    clock = ManualClock()
    poison, after = ship.insert(1, "a", 1, "1.00"), ship.insert(2, "b", 1, "1.00")
    receive(shore[0], ship.node_id, [poison])
    applier = FaultyApplier(make_applier(shore_mariadb, database), poison_key=1)
    processor = processor_for(shore, applier, clock, backoff=Backoff(max_attempts=2))

    assert processor.run_once() == 0  # contained: the worker lives on
    assert inbox_states(shore[0], ship.node_id)[poison.event_id] == ("PENDING", None)
    clock.advance(3600)
    assert processor.run_once() == 0
    assert inbox_states(shore[0], ship.node_id)[poison.event_id] == ("DEAD", None)
    receive(shore[0], ship.node_id, [after])
    clock.advance(3600)
    assert processor.run_once() == 0  # the dead event holds its partition

    queue = PostgresWorkQueue(shore[0])
    dead_job = pg_rows(shore[0], "SELECT job_id FROM inbox_event WHERE event_id = %s",
                       (poison.event_id,))[0][0]
    with pytest.raises(ReplayRefused):
        skip_event(queue, shore[1].apply_jobs, ship.node_id, poison.event_id, "alice", " ")
    skip_event(queue, shore[1].apply_jobs, ship.node_id, poison.event_id, "alice",
               "known bad row, re-entered by hand")
    assert drain(processor) == 2

    assert reasons(shore[0], [poison, after]) == [
        ("TERMINAL", "REJECTED", "SKIPPED_BY_OPERATOR"), ("TERMINAL", "APPLIED", None)]
    assert set(items(conn)) == {2}
    skips = [e for e in shore[1].apply_jobs.events.get(uuid.UUID(str(dead_job)))
             if type(e).__qualname__ == "ApplyJob.SkipRequested"]
    assert [(e.event_ids, e.actor, e.reason) for e in skips] == [
        ([str(poison.event_id)], "alice", "known bad row, re-entered by hand")]
    # A skip is undone only on purpose, one event at a time, never by replaying a class.
    assert replay(queue, shore[1].apply_jobs, ErrorClass.DATA, "bob", "all data",
                  ship.node_id) == 0


def test_one_rejected_event_is_replayed_once_the_target_is_fixed(shore, target_db,
                                                                    shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    too_long = ship.insert(1, "x" * 50, 1, "1.00")  # name is VARCHAR(20)
    receive(shore[0], ship.node_id, [too_long])
    processor = processor_for(shore, make_applier(shore_mariadb, database))
    drain(processor)
    with conn.cursor() as cursor:
        cursor.execute("ALTER TABLE items MODIFY name VARCHAR(80) NOT NULL")
    processor.applier.forget_tables()

    queue = PostgresWorkQueue(shore[0])
    replay_event(queue, shore[1].apply_jobs, ship.node_id, too_long.event_id, "bob",
                 "column widened")
    assert drain(processor) == 1
    assert reasons(shore[0], [too_long]) == [("TERMINAL", "APPLIED", None)]
    with pytest.raises(ReplayRefused):  # applied now: nothing to replay
        replay_event(queue, shore[1].apply_jobs, ship.node_id, too_long.event_id, "bob", "x")


def test_jobs_skip_and_replay_of_one_event_from_the_command_line(
        shore, target_db, shore_mariadb, pg_database, monkeypatch, capsys):
    database, _ = target_db
    ship = ShipLog(node(), "shipdb")
    refused = ship.insert(1, "x" * 50, 1, "1.00")
    receive(shore[0], ship.node_id, [refused])
    processor = processor_for(shore, make_applier(shore_mariadb, database))
    drain(processor)
    use_event_store(monkeypatch, pg_database)

    code = main(["jobs", "skip", "--node", ship.node_id, "--event", str(refused.event_id),
                 "--reason", "obsolete row", "--actor", "carol"])
    assert code == 0, capsys.readouterr().err
    assert "skipped" in capsys.readouterr().out
    assert drain(processor) == 1
    assert reasons(shore[0], [refused]) == [("TERMINAL", "REJECTED", "SKIPPED_BY_OPERATOR")]
    # The backlog counts the one event once: the skip took it out of its first result.
    with read_side(pg_database, shore[1]) as read:
        read.catch_up(shore[0])
    with shore[0].connection() as conn:
        counted = conn.execute("SELECT state, sum(events) FROM backlog WHERE node_id = %s"
                               " GROUP BY state", (ship.node_id,)).fetchall()
    assert counted == [("REJECTED", 1)]
    code = main(["jobs", "replay", "--event", str(uuid.uuid4()), "--node", ship.node_id,
                 "--reason", "why"])
    assert code == 2
    assert "not dead or rejected" in capsys.readouterr().err
    code = main(["jobs", "replay", "--event", str(refused.event_id), "--reason", "why"])
    assert code == 2  # one event needs its node

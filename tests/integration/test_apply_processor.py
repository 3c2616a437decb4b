"""The apply processor on real PostgreSQL (event streams, inbox) and MariaDB (target):
order, conflicts, gaps, transient failures, replay and recovery after a crash between the
MySQL commit and the PostgreSQL finalize."""

from __future__ import annotations

import secrets
import uuid
from decimal import Decimal

import pytest

from tests.clocks import ManualClock
from tests.integration.shore_support import (
    ITEMS_DDL,
    ShipLog,
    inbox_states,
    ledger_ids,
    migrated_pool,
    pg_rows,
    receive,
    shore_apps,
)
from tidesync.apps.jobs import ReplayRefused, replay, summarize
from tidesync.domain.apply_job import ApplyJob, ErrorClass, apply_job_id
from tidesync.domain.backoff import Backoff
from tidesync.domain.conflict_case import ConflictCase
from tidesync.projections.engine import PostgresProjectionRunner
from tidesync.projections.receipts import ReceiptsProjection
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.settings import ApplyConfig
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

pytestmark = pytest.mark.services

SHORE_NODE = "shore"


Clock = ManualClock


@pytest.fixture
def target_db(shore_mariadb, make_mariadb_database):
    name = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=name, autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(ITEMS_DDL)
    enable_mysql_table(conn, name, "items", SHORE_NODE)
    yield name, conn
    conn.close()


@pytest.fixture
def shore(pg_database):
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps:
        yield pool, apps


def make_applier(instance, database: str, **options) -> MySQLTargetApplier:
    return MySQLTargetApplier(host=instance.host, port=instance.port, user=instance.user,
                              password=instance.password, node_id=SHORE_NODE,
                              route=lambda db, table: (database, table), **options)


def make_processor(shore, applier, clock, worker="w1", **settings) -> ApplyProcessor:
    pool, apps = shore
    return ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool), applier,
                          clock, ProcessorSettings(worker_id=worker, **settings),
                          draw=lambda: 0.5)


def drain(processor: ApplyProcessor, limit: int = 50) -> int:
    total = 0
    for _ in range(limit):
        count = processor.run_once()
        if count == 0:
            return total
        total += count
    raise AssertionError("processor did not go idle")


def items(conn) -> dict[int, tuple]:
    with conn.cursor() as cursor:
        cursor.execute("SELECT id, name, qty, price, _sync_revision, _sync_origin,"
                       " _sync_event_id FROM items")
        return {row[0]: row[1:] for row in cursor.fetchall()}


def node() -> str:
    return f"ship-{secrets.token_hex(4)}"


def test_events_apply_in_order_exactly_once_with_receipts(shore, target_db, shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    events = [ship.insert(1, "anchor", 3, "10.50"), ship.insert(2, "rope", 7, "2.25"),
              ship.update(1, qty=4), ship.update(1, name="anchor-xl", price=Decimal("11.00")),
              ship.delete(2), ship.insert(3, "buoy", 1, "99.99")]
    receive(shore[0], ship.node_id, events[:3])
    receive(shore[0], ship.node_id, events[3:])
    receive(shore[0], ship.node_id, events[1:4])  # a retransmission overlapping both
    processor = make_processor(shore, make_applier(shore_mariadb, database), Clock())

    assert drain(processor) == 6

    rows = items(conn)
    assert set(rows) == {1, 3}
    assert rows[1][:3] == ("anchor-xl", 4, Decimal("11.00"))
    assert rows[1][3] == ship.rows[1][1].text  # the ship's revision, not a new one
    assert rows[1][4] == ship.node_id and rows[1][5] == str(events[3].event_id)
    assert sorted(ledger_ids(conn, database)) == sorted(str(e.event_id) for e in events)
    assert set(inbox_states(shore[0], ship.node_id).values()) == {("TERMINAL", "APPLIED")}

    receipts = PostgresProjectionRunner(ReceiptsProjection(), shore[1].apply_jobs, shore[0])
    receipts.run_until_idle()
    got = pg_rows(shore[0], "SELECT event_id, result, source_position FROM receipt"
                            " WHERE origin_node_id = %s ORDER BY seq", (ship.node_id,))
    assert [(r[0], r[1]) for r in got] == [(e.event_id, "APPLIED") for e in events]


def test_a_conflict_is_captured_once_and_does_not_hold_other_keys(shore, target_db,
                                                                  shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    receive(shore[0], ship.node_id, [ship.insert(1, "anchor", 3, "10.50"),
                                     ship.insert(2, "rope", 7, "2.25")])
    processor = make_processor(shore, make_applier(shore_mariadb, database), Clock())
    drain(processor)
    with conn.cursor() as cursor:  # a local shore edit: the trigger gives a new revision
        cursor.execute("UPDATE items SET qty = 100 WHERE id = 1")
    shore_revision = items(conn)[1][3]

    first, second = ship.update(1, qty=5), ship.update(1, qty=6)
    other = ship.update(2, qty=8)
    receive(shore[0], ship.node_id, [first, other, second])
    drain(processor)

    states = inbox_states(shore[0], ship.node_id)
    assert states[first.event_id] == ("TERMINAL", "CONFLICT_RECORDED")
    assert states[second.event_id] == ("TERMINAL", "CONFLICT_RECORDED")
    assert states[other.event_id] == ("TERMINAL", "APPLIED")
    assert items(conn)[1][1] == 100 and items(conn)[2][1] == 8
    conflict_ids = {r[0] for r in pg_rows(
        shore[0], "SELECT conflict_id FROM inbox_event WHERE event_id = ANY(%s)",
        ([first.event_id, second.event_id],))}
    assert len(conflict_ids) == 1  # one active case per rule + record key
    case = shore[1].conflicts.get_case(conflict_ids.pop())
    assert isinstance(case, ConflictCase)
    assert [e["event_id"] for e in case.evidence] == [str(first.event_id), str(second.event_id)]
    assert case.evidence[0]["current_revision"] == shore_revision
    assert dict((n, v) for n, v in case.evidence[0]["current_row"])["qty"] == ["int", "100"]


def test_a_sequence_gap_holds_only_what_follows_it(shore, target_db, shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    e1, e2, e3, e4 = (ship.insert(k, f"n{k}", k, "1.00") for k in (1, 2, 3, 4))
    receive(shore[0], ship.node_id, [e1, e2, e4])
    clock = Clock()
    processor = make_processor(shore, make_applier(shore_mariadb, database), clock)

    assert drain(processor) == 2
    assert set(items(conn)) == {1, 2}
    gap = pg_rows(shore[0], "SELECT gap_at_sequence FROM apply_partition"
                            " WHERE origin_node_id = %s", (ship.node_id,))
    assert gap == [(3,)]
    assert inbox_states(shore[0], ship.node_id)[e4.event_id] == ("PENDING", None)

    receive(shore[0], ship.node_id, [e3])  # the ship retransmits the missing event
    clock.advance(5)
    assert drain(processor) == 2
    assert set(items(conn)) == {1, 2, 3, 4}


def test_a_gap_held_past_its_deadline_shows_as_gap_stalled(shore, target_db, shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    e1, e2, e3, e4 = (ship.insert(k, f"n{k}", k, "1.00") for k in (1, 2, 3, 4))
    receive(shore[0], ship.node_id, [e1, e2, e4])
    clock = Clock()
    processor = make_processor(shore, make_applier(shore_mariadb, database), clock,
                               scope=ApplyConfig(gap_deadline_seconds=600))
    queue = PostgresWorkQueue(shore[0])
    assert drain(processor) == 2
    assert [(r.state, r.reason_code, r.events) for r in summarize(queue, ship.node_id)] == [
        ("PENDING", None, 1)]

    clock.advance(601)
    assert drain(processor) == 0
    assert [(r.state, r.reason_code, r.events) for r in summarize(queue, ship.node_id)] == [
        ("PENDING", "GAP_STALLED", 1)]
    released = pg_rows(shore[0], "SELECT count(*) FROM apply_jobs_events WHERE topic LIKE %s"
                                 " AND convert_from(state, 'UTF8') LIKE %s",
                       ("%ApplyJob.Released", "%GAP_STALLED%"))
    assert released == [(1,)]

    receive(shore[0], ship.node_id, [e3])  # the missing event arrives after all
    clock.advance(5)
    assert drain(processor) == 2
    assert set(items(conn)) == {1, 2, 3, 4}
    assert summarize(queue, ship.node_id) == []


def test_transient_target_errors_wait_with_backoff_then_apply(shore, target_db, shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    receive(shore[0], ship.node_id, [ship.insert(1, "anchor", 3, "10.50")])
    clock = Clock()
    processor = make_processor(shore, make_applier(shore_mariadb, database,
                                                   lock_wait_timeout=1), clock)
    drain(processor)
    receive(shore[0], ship.node_id, [update := ship.update(1, qty=9)])
    blocker = shore_mariadb.connect(database=database, autocommit=False)
    with blocker.cursor() as cursor:
        cursor.execute("SELECT * FROM items WHERE id = 1 FOR UPDATE")
        assert processor.run_once() == 0  # lock wait timeout: nothing terminal
    blocker.rollback()
    blocker.close()

    waiting = pg_rows(shore[0], "SELECT attempts, not_before FROM apply_partition"
                                " WHERE origin_node_id = %s", (ship.node_id,))
    assert waiting[0][0] == 1 and waiting[0][1] > clock.now
    assert processor.run_once() == 0  # still waiting
    clock.advance(2)
    assert drain(processor) == 1
    assert inbox_states(shore[0], ship.node_id)[update.event_id] == ("TERMINAL", "APPLIED")
    assert items(conn)[1][1] == 9
    retried = shore[1].apply_jobs.get_job(apply_job_id(ship.node_id, ship.topic, 0, 0, 2))
    recorded = [type(e).__qualname__ for e in shore[1].apply_jobs.events.get(retried.id)]
    assert recorded == ["ApplyJob.Claimed", "ApplyJob.RetryScheduled"]


def test_exhausted_retries_go_dead_and_an_operator_replays_them(shore, target_db,
                                                                shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    receive(shore[0], ship.node_id, [ship.insert(1, "anchor", 3, "10.50")])
    clock = Clock()
    processor = make_processor(shore, make_applier(shore_mariadb, database,
                                                   lock_wait_timeout=1), clock,
                               backoff=Backoff(max_attempts=1))
    drain(processor)
    receive(shore[0], ship.node_id, [update := ship.update(1, qty=9)])
    blocker = shore_mariadb.connect(database=database, autocommit=False)
    with blocker.cursor() as cursor:
        cursor.execute("SELECT * FROM items WHERE id = 1 FOR UPDATE")
        processor.run_once()
    blocker.rollback()
    blocker.close()
    assert inbox_states(shore[0], ship.node_id)[update.event_id] == ("DEAD", None)
    queue = PostgresWorkQueue(shore[0])
    summary = summarize(queue, ship.node_id)
    assert [(r.state, r.error_class, r.events) for r in summary] == [("DEAD", "EXHAUSTED", 1)]
    clock.advance(3600)
    assert processor.run_once() == 0  # a dead event holds its partition

    with pytest.raises(ReplayRefused):
        replay(queue, shore[1].apply_jobs, ErrorClass.MALFORMED, "op", "why", ship.node_id)
    assert replay(queue, shore[1].apply_jobs, ErrorClass.EXHAUSTED, "alice",
                  "lock released", ship.node_id) == 1
    assert drain(processor) == 1
    assert items(conn)[1][1] == 9
    job_id = pg_rows(shore[0], "SELECT job_id FROM inbox_event WHERE event_id = %s",
                     (update.event_id,))[0][0]
    assert job_id is not None


def test_crash_between_target_commit_and_finalize_recovers_from_the_ledger(
        shore, target_db, shore_mariadb, monkeypatch):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 6)]
    receive(shore[0], ship.node_id, events)
    clock = Clock()
    crashing = make_processor(shore, make_applier(shore_mariadb, database), clock, worker="w1")

    real_save = shore[1].apply_jobs.save

    def crash_at_finalize(*aggregates, **kwargs):
        job = aggregates[0]
        if any(type(e).__qualname__ == "ApplyJob.Finalized" for e in job.pending_events):
            raise SystemExit("killed after the MySQL commit")
        return real_save(*aggregates, **kwargs)

    monkeypatch.setattr(shore[1].apply_jobs, "save", crash_at_finalize)
    with pytest.raises(SystemExit):
        crashing.run_once()
    monkeypatch.undo()
    assert len(ledger_ids(conn, database)) == 5  # committed in MySQL, not finalized

    survivor = make_processor(shore, make_applier(shore_mariadb, database), clock, worker="w2")
    assert survivor.run_once() == 0  # the dead worker's lease still holds
    expire_leases(shore[0], ship.node_id)
    assert drain(survivor) == 5
    assert set(inbox_states(shore[0], ship.node_id).values()) == {("TERMINAL", "APPLIED")}
    assert len(ledger_ids(conn, database)) == 5  # applied exactly once
    assert set(items(conn)) == {1, 2, 3, 4, 5}


def expire_leases(pool, node_id: str) -> None:
    """Let a node's apply leases run out: lease expiry is database time, not the test's
    clock."""
    with pool.connection() as conn:
        conn.execute("UPDATE apply_partition SET"
                     " lease_expires_at = clock_timestamp() - interval '1 second'"
                     " WHERE origin_node_id = %s", (node_id,))


class AfterEachChunk:
    """The real applier, calling `hook` after each chunk it commits."""

    def __init__(self, applier: MySQLTargetApplier, hook) -> None:
        self.applier, self.hook = applier, hook

    def apply_chunk(self, events):
        outcomes = self.applier.apply_chunk(events)
        self.hook()
        return outcomes

    def __getattr__(self, name: str):
        return getattr(self.applier, name)


def test_a_running_job_renews_its_lease_between_chunks(shore, target_db, shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    events = [ship.insert(k, f"n{k}", k, "1.00") for k in range(1, 7)]
    receive(shore[0], ship.node_id, events)
    clock = Clock()
    other = make_processor(shore, make_applier(shore_mariadb, database), clock, worker="w2")
    seen_by_other: list[int] = []

    def after_chunk() -> None:
        if not seen_by_other:
            expire_leases(shore[0], ship.node_id)  # the first chunk ran as long as the lease
            seen_by_other.append(-1)
        else:
            seen_by_other.append(other.run_once())

    slow = AfterEachChunk(make_applier(shore_mariadb, database), after_chunk)
    worker = make_processor(shore, slow, clock, worker="w1", chunk_size=2)
    assert worker.run_once() == 6
    assert seen_by_other == [-1, 0, 0]  # renewed before each later chunk: nobody took over
    assert set(inbox_states(shore[0], ship.node_id).values()) == {("TERMINAL", "APPLIED")}
    assert len(ledger_ids(conn, database)) == 6


def test_apply_job_stream_records_each_step(shore, target_db, shore_mariadb):
    database, _ = target_db
    ship = ShipLog(node(), "shipdb")
    event = ship.insert(1, "anchor", 3, "10.50")
    receive(shore[0], ship.node_id, [event])
    drain(make_processor(shore, make_applier(shore_mariadb, database), Clock()))
    job_id = pg_rows(shore[0], "SELECT job_id FROM inbox_event WHERE event_id = %s",
                     (event.event_id,))[0][0]
    recorded = list(shore[1].apply_jobs.events.get(uuid.UUID(str(job_id))))
    assert [type(e).__qualname__ for e in recorded] == [
        "ApplyJob.Claimed", "ApplyJob.TargetCommitted", "ApplyJob.Finalized"]
    assert all(getattr(e, "actor", None) for e in recorded)
    job = shore[1].apply_jobs.get_job(job_id)
    assert isinstance(job, ApplyJob) and job.results[str(event.event_id)].result == "APPLIED"


def test_permanent_errors_reject_one_event_and_apply_the_rest(shore, target_db, shore_mariadb):
    database, conn = target_db
    ship = ShipLog(node(), "shipdb")
    good1 = ship.insert(1, "anchor", 3, "10.50")
    too_long = ship.insert(2, "x" * 50, 1, "1.00")  # name is VARCHAR(20)
    good2 = ship.insert(3, "buoy", 1, "1.00")
    receive(shore[0], ship.node_id, [good1, too_long, good2])
    drain(make_processor(shore, make_applier(shore_mariadb, database), Clock()))
    states = inbox_states(shore[0], ship.node_id)
    assert states[too_long.event_id] == ("TERMINAL", "REJECTED")
    assert states[good1.event_id] == states[good2.event_id] == ("TERMINAL", "APPLIED")
    reason = pg_rows(shore[0], "SELECT reason_code, error_class FROM inbox_event"
                               " WHERE event_id = %s", (too_long.event_id,))
    assert reason == [("DATA_TOO_LONG", "DATA")]
    assert set(items(conn)) == {1, 3}




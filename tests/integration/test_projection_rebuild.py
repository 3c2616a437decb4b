"""Rebuilding views side by side: after damaging a view's rows, a rebuild gives back exactly
the view built incrementally, while a reader querying it throughout only ever sees the damaged
view or the rebuilt one — never an empty or half-built one — and each rebuild is audited."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from tests.integration.projection_support import (
    new_node_id,
    read_side,
    run_scenario,
    save_synthetic_jobs,
    shore_apps,
)
from tests.integration.shore_support import migrated_pool, pg_rows
from tidesync.projections.rebuild import RebuildError, RebuildProgress, rebuild_view
from tidesync.projections.registry import REBUILD_SUFFIX

pytestmark = pytest.mark.services

# How each view is damaged: rows deleted, then a column altered in some others.
DAMAGE = {
    "receipts": ("DELETE FROM receipt WHERE seq % 3 = 0",
                 "UPDATE receipt SET result = 'EXPIRED_APPROVED' WHERE seq % 5 = 1"),
    "record_head": ("DELETE FROM record_head WHERE log_position % 2 = 0",
                    "UPDATE record_head SET tombstone = NOT tombstone"
                    " WHERE key_digest < '8'"),
    "conflict_center": ("DELETE FROM conflict_center WHERE conflict_id IN (SELECT conflict_id"
                        " FROM conflict_center ORDER BY conflict_id OFFSET 1)",
                        "UPDATE conflict_center SET state = 'CANCELLED', evidence_count = 0"),
    "node_overview": ("DELETE FROM node_overview WHERE node_id IN (SELECT node_id"
                      " FROM node_overview ORDER BY node_id OFFSET 1)",
                      "UPDATE node_overview SET client_version = 'wrong', health = NULL,"
                      " status = 'ACTIVE'"),
    "backlog": ("DELETE FROM backlog WHERE state = 'CONFLICT_RECORDED'",
                "UPDATE backlog SET events = events + 1000 WHERE state = 'APPLIED'"),
    "audit": ("DELETE FROM audit_event WHERE version > 1",
              "UPDATE audit_event SET actor = 'mallory' WHERE version = 1"),
}
MAIN_TABLE = {"receipts": "receipt", "audit": "audit_event"}


def signature(conn: psycopg.Connection, table: str) -> tuple[int, str]:
    """Row count and a digest of every row (audit rows without seq: a rebuild may interleave
    applications differently)."""
    row = conn.execute(
        f"SELECT count(*), coalesce(md5(string_agg(r, '|' ORDER BY r)), '') FROM"
        f" (SELECT (to_jsonb(t) - 'seq')::text AS r FROM {table} t) s").fetchone()
    return int(row[0]), str(row[1])


def snapshot(pool, tables: tuple[str, ...], view: str) -> dict[str, list[tuple]]:
    ignored = " - 'seq'" if view == "audit" else ""
    return {table: sorted(r[0] for r in pg_rows(
        pool, f"SELECT (to_jsonb(t){ignored})::text FROM {table} t")) for table in tables}


def index_names(pool, table: str) -> list[str]:
    return [r[0] for r in pg_rows(pool, "SELECT indexname FROM pg_indexes WHERE tablename = %s"
                                        " ORDER BY 1", (table,))]


class Reader(threading.Thread):
    """Queries a table as fast as it can until stopped, remembering what it saw."""

    def __init__(self, dsn: str, table: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.table = dsn, table
        self.seen: list[tuple[int, str]] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    try:
                        self.seen.append(signature(conn, self.table))
                    except psycopg.Error as error:
                        self.errors.append(error)
                    time.sleep(0.001)
        except psycopg.Error as error:  # could not connect: the test fails, never hangs
            self.errors.append(error)

    def wait_until_reading(self) -> None:
        while not self.seen:
            assert self.is_alive(), f"the reader stopped before reading: {self.errors}"
            time.sleep(0.001)


@pytest.fixture
def built(pg_database, shore_mariadb, make_mariadb_database):
    database = make_mariadb_database(shore_mariadb)
    conn = shore_mariadb.connect(database=database, autocommit=True)
    with migrated_pool(pg_database) as pool, shore_apps(pg_database) as apps, \
            read_side(pg_database, apps) as read:
        sent = run_scenario(pool, apps, read, shore_mariadb, database, conn)
        from tidesync.apps.nodes import Actor, NodeService

        NodeService(read.nodes, None).revoke(sent.node_id, Actor("carol", "sold"),
                                             sent_time())
        save_synthetic_jobs(apps, new_node_id(), jobs=40, per_job=50)
        read.catch_up(pool)
        yield pg_database, pool, apps, read
    conn.close()


def sent_time():
    import datetime as dt

    return dt.datetime(2019, 12, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize("view", list(DAMAGE))
def test_rebuild_restores_a_damaged_view_and_readers_never_see_it_half_built(built, view):
    pg_database, pool, _apps, read = built
    spec = read.catalogue.view(view)
    table = MAIN_TABLE.get(view, view)
    before = snapshot(pool, spec.tables, view)
    indexes = {t: index_names(pool, t) for t in spec.tables}
    with pool.connection() as conn:
        full = signature(conn, table)
        for statement in DAMAGE[view]:
            conn.execute(statement)
        conn.commit()
        damaged = signature(conn, table)
    assert damaged != full and full[0] > 0

    reader = Reader(pg_database.dsn, table)
    reader.start()
    reader.wait_until_reading()
    progress: list[RebuildProgress] = []
    result = rebuild_view(view, apps=read.apps, pool=pool, actor="tester",
                          reason=f"damaged {view} in a test", catalogue=read.catalogue,
                          batch_size=2, on_progress=progress.append)
    time.sleep(0.02)
    reader.stop.set()
    reader.join()

    after = snapshot(pool, spec.tables, view)
    if view == "audit":  # the rebuild's own request is an operator action too
        own = [r for r in after["audit_event"] if str(result.action_id) in r]
        assert len(own) == 1 and "OperatorAction.Requested" in own[0]
        after["audit_event"].remove(own[0])
    assert after == before
    assert not reader.errors
    assert set(reader.seen) <= {damaged, signature_now(pool, table)}
    assert damaged in reader.seen and reader.seen[-1] == signature_now(pool, table)
    assert all(count > 0 for count, _ in reader.seen)
    assert [p.phase for p in progress][-2:] == ["SWITCHING", "DONE"]
    assert progress[-1].fraction == 1.0
    # Names are restored, nothing of the shadow is left, positions are the live ones.
    assert {t: index_names(pool, t) for t in spec.tables} == indexes
    leftovers = pg_rows(pool, "SELECT tablename FROM pg_tables WHERE tablename LIKE %s",
                        (f"%{REBUILD_SUFFIX}",))
    assert leftovers == []
    assert pg_rows(pool, "SELECT count(*) FROM projection_tracking WHERE name LIKE %s",
                   (f"%{REBUILD_SUFFIX}",)) == [(0,)]
    for name, position in result.positions.items():
        assert pg_rows(pool, "SELECT position FROM projection_tracking WHERE name = %s",
                       (name,)) == [(position,)]
    action = read.apps["operations"].repository.get(result.action_id)
    assert (action.outcome, action.requested_by, action.target) == ("COMPLETED", "tester", view)
    # The live view carries on from the moved positions without writing anything twice.
    read.catch_up(pool)
    if view != "audit":
        assert snapshot(pool, spec.tables, view) == before


def signature_now(pool, table: str) -> tuple[int, str]:
    with pool.connection() as conn:
        return signature(conn, table)


def test_a_rebuild_under_load_misses_nothing(built):
    """New jobs keep arriving and a live runner keeps following while record_head rebuilds;
    afterwards the view holds the newest result of every record."""
    _pg_database, pool, apps, read = built
    node_id = new_node_id()
    expected = save_synthetic_jobs(apps, node_id, jobs=20, per_job=30)
    stop = threading.Event()
    live = read.catalogue.runner("record_head", read.apps, pool)

    def produce() -> None:
        job_no = 21
        while not stop.is_set():
            expected.update(save_synthetic_jobs(apps, node_id, jobs=1, per_job=30,
                                                first_job_no=job_no))
            job_no += 1
            live.run_until_idle()
            time.sleep(0.005)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    rebuild_view("record_head", apps=read.apps, pool=pool, actor="tester", reason="under load",
                 catalogue=read.catalogue, batch_size=3)
    stop.set()
    producer.join()
    live.run_until_idle()
    rows = pg_rows(pool, "SELECT key_digest, last_event_id::text, tombstone FROM record_head"
                         " WHERE origin_node_id = %s", (node_id,))
    assert {r[0]: (r[1], r[2]) for r in rows} == expected


def test_a_second_rebuild_of_the_same_view_is_refused_and_failures_are_recorded(built):
    pg_database, pool, _apps, read = built
    holder = psycopg.connect(pg_database.dsn, autocommit=True)
    try:
        holder.execute("SELECT pg_advisory_lock(%s, hashtext(%s))",
                       (0x7476, f"receipts{REBUILD_SUFFIX}:session"))
        with pytest.raises(RebuildError) as refused:
            rebuild_view("receipts", apps=read.apps, pool=pool, actor="tester", reason="twice",
                         catalogue=read.catalogue)
        assert refused.value.code == "REBUILD_RUNNING"
    finally:
        holder.close()

    def explode(progress: RebuildProgress) -> None:
        if progress.phase == "COPYING" and progress.processed > 0:
            raise KeyboardInterrupt

    before = snapshot(pool, ("receipt",), "receipts")
    with pytest.raises(KeyboardInterrupt):
        rebuild_view("receipts", apps=read.apps, pool=pool, actor="tester", reason="stopped",
                     catalogue=read.catalogue, batch_size=1, on_progress=explode)
    assert snapshot(pool, ("receipt",), "receipts") == before
    assert pg_rows(pool, "SELECT count(*) FROM pg_tables WHERE tablename = %s",
                   (f"receipt{REBUILD_SUFFIX}",)) == [(0,)]
    read.catch_up(pool)
    failed = pg_rows(pool, "SELECT event_type, actor, reason FROM audit_event"
                           " WHERE reason = 'stopped' ORDER BY version")
    assert failed == [("OperatorAction.Requested", "tester", "stopped"),
                      ("OperatorAction.Failed", "tester", "stopped")]


def test_grants_of_reader_roles_survive_a_rebuild(built):
    pg_database, pool, _, read = built
    role = f"tidesync_reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_database.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}"')
        try:
            admin.execute(f'GRANT SELECT ON conflict_center TO "{role}"')
            rebuild_view("conflict_center", apps=read.apps, pool=pool, actor="tester",
                         reason="grants", catalogue=read.catalogue)
            granted = admin.execute("SELECT has_table_privilege(%s, 'conflict_center',"
                                    " 'SELECT'), has_table_privilege(%s, 'conflict_center',"
                                    " 'INSERT')", (role, role)).fetchone()
            assert granted == (True, False)
        finally:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')

"""A remote DELETE is "mark then delete" (§12): the compare-and-set UPDATE stamps the tombstone
revision, origin and event id, then the row is deleted, in one transaction — on a real MariaDB
and on SQLite. An AFTER DELETE trigger records the before image the binlog would carry."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.shore_support import run_sql
from tests.target_events import SHIP, SHORE, insert, revision
from tests.target_events import delete as delete_event
from tidesync.domain.change_event import Revision, tombstone_revision
from tidesync.localservices import MariaDBInstance
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.target.sqlite import SQLiteTargetApplier
from tidesync.target.sqlite_schema import enable_sqlite_table

PARTS_DDL = ("CREATE TABLE parts (id BIGINT PRIMARY KEY, name VARCHAR(20) NOT NULL,"
             " qty INT NULL)")
GONE_DDL = ("CREATE TABLE gone (id BIGINT, revision VARCHAR(64), origin VARCHAR(64),"
            " event_id VARCHAR(64))")




@pytest.fixture
def mysql_db(shore_mariadb: MariaDBInstance,
             make_mariadb_database: Callable[[MariaDBInstance], str]) -> str:
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, PARTS_DDL + " ENGINE=InnoDB", GONE_DDL)
    connection = shore_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "parts", SHORE)
    finally:
        connection.close()
    run_sql(shore_mariadb, database,
           "CREATE TRIGGER parts_gone AFTER DELETE ON parts FOR EACH ROW INSERT INTO gone"
           " VALUES (OLD.id, OLD._sync_revision, OLD._sync_origin, OLD._sync_event_id)")
    return database


def _mysql_applier(instance: MariaDBInstance) -> MySQLTargetApplier:
    return MySQLTargetApplier(host=instance.host, port=instance.port, user=instance.user,
                              password=instance.password, node_id=SHORE)


def test_mysql_remote_delete_marks_then_deletes(shore_mariadb, mysql_db):
    applier = _mysql_applier(shore_mariadb)
    try:
        row = {"id": 1, "name": "pump", "qty": 1}
        seeded = insert(mysql_db, "parts", row)
        assert applier.apply_chunk([seeded])[0].kind is TargetOutcomeKind.APPLIED
        event = delete_event(mysql_db, "parts", row, seeded.result_revision)
        outcome = applier.apply_chunk([event])[0]
        assert outcome.kind is TargetOutcomeKind.APPLIED
        assert run_sql(shore_mariadb, mysql_db, "SELECT id FROM parts") == []
        # The deleted row's before image carries the mark: the platform-write proof.
        assert run_sql(shore_mariadb, mysql_db, "SELECT * FROM gone") == [
            (1, tombstone_revision(event.event_id).text, SHIP, str(event.event_id))]
        ledger = run_sql(shore_mariadb, mysql_db, "SELECT event_id, origin_node_id"
                        " FROM _sync_applied ORDER BY applied_at")
        assert (str(event.event_id), SHIP) in ledger
        # The same event again: the ledger answers, nothing is written.
        again = applier.apply_chunk([event])[0]
        assert again.kind is TargetOutcomeKind.ALREADY_APPLIED
        assert again.reason_code == "IN_LEDGER"
        assert len(run_sql(shore_mariadb, mysql_db, "SELECT * FROM gone")) == 1
    finally:
        applier.close()


def test_mysql_remote_delete_with_a_stale_base_is_a_conflict_and_keeps_the_row(
        shore_mariadb, mysql_db):
    applier = _mysql_applier(shore_mariadb)
    try:
        row = {"id": 2, "name": "valve", "qty": 5}
        seeded = insert(mysql_db, "parts", row)
        applier.apply_chunk([seeded])
        stale = delete_event(mysql_db, "parts", row, revision())
        # In one chunk with a good delete of another row: the pipeline counts two statements
        # per DELETE and must still judge each event by its own mark.
        other = {"id": 3, "name": "hose", "qty": 1}
        other_insert = insert(mysql_db, "parts", other)
        applier.apply_chunk([other_insert])
        good = delete_event(mysql_db, "parts", other, other_insert.result_revision)
        first, second = applier.apply_chunk([stale, good])
        assert first.kind is TargetOutcomeKind.CONFLICT
        assert first.reason_code == "REVISION_MISMATCH"
        assert first.current_revision == seeded.result_revision
        assert first.current_row is not None and first.current_row["name"] == "valve"
        assert second.kind is TargetOutcomeKind.APPLIED
        rows = run_sql(shore_mariadb, mysql_db,
                      "SELECT id, name, _sync_revision, _sync_event_id FROM parts")
        assert seeded.result_revision is not None
        assert rows == [(2, "valve", seeded.result_revision.text, str(seeded.event_id))]
        assert run_sql(shore_mariadb, mysql_db, "SELECT id FROM gone") == [(3,)]
        ledger = {r[0] for r in run_sql(shore_mariadb, mysql_db,
                                       "SELECT event_id FROM _sync_applied")}
        assert str(stale.event_id) not in ledger and str(good.event_id) in ledger
    finally:
        applier.close()


def test_mysql_delete_of_a_missing_row_is_a_conflict(shore_mariadb, mysql_db):
    applier = _mysql_applier(shore_mariadb)
    try:
        event = delete_event(mysql_db, "parts", {"id": 9, "name": "x", "qty": 1}, revision())
        outcome = applier.apply_chunk([event])[0]
        assert outcome.kind is TargetOutcomeKind.CONFLICT
        assert outcome.reason_code == "ROW_MISSING"
    finally:
        applier.close()


def test_sqlite_remote_delete_marks_then_deletes(tmp_path: Path):
    path = tmp_path / "target.sqlite"
    with sqlite3.connect(path) as connection:
        connection.execute(PARTS_DDL)
        connection.execute(GONE_DDL)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        enable_sqlite_table(connection, "parts", SHORE)
        connection.execute(
            "CREATE TRIGGER parts_gone AFTER DELETE ON parts FOR EACH ROW BEGIN INSERT INTO gone"
            " VALUES (OLD.id, OLD._sync_revision, OLD._sync_origin, OLD._sync_event_id); END")
    finally:
        connection.close()
    applier = SQLiteTargetApplier(path, node_id=SHORE)
    try:
        row = {"id": 1, "name": "pump", "qty": 1}
        seeded = insert("main", "parts", row)
        assert applier.apply_chunk([seeded])[0].kind is TargetOutcomeKind.APPLIED
        stale = delete_event("main", "parts", row, revision())
        assert applier.apply_chunk([stale])[0].kind is TargetOutcomeKind.CONFLICT
        event = delete_event("main", "parts", row, seeded.result_revision)
        assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.APPLIED
        assert applier.apply_chunk([event])[0].kind is TargetOutcomeKind.ALREADY_APPLIED
    finally:
        applier.close()
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT count(*) FROM parts").fetchone() == (0,)
        gone = check.execute("SELECT * FROM gone").fetchall()
        ledger = {r[0] for r in check.execute("SELECT event_id FROM _sync_applied")}
    assert gone == [(1, tombstone_revision(event.event_id).text, SHIP, str(event.event_id))]
    assert Revision.parse(gone[0][1]) == tombstone_revision(event.event_id)
    assert str(event.event_id) in ledger and str(stale.event_id) not in ledger

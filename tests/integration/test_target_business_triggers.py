"""Business triggers on a MariaDB target: listed by `target enable` and `target status`, and an
applied row that one of them changed is marked TRIGGER_MODIFIED (with the columns, never the
values) all the way to the job's per-event result and the receipt."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest

from tests.clocks import ManualClock
from tests.integration.shore_support import ITEMS_DDL, ShipLog, receive, run_sql
from tests.integration.test_apply_processor import (
    drain,
    make_applier,
    make_processor,
    node,
    shore,  # noqa: F401 - a fixture
)
from tests.target_events import SHORE, insert, update
from tidesync.entrypoints.cli import main as cli_main
from tidesync.localservices import MariaDBInstance
from tidesync.projections.engine import PostgresProjectionRunner
from tidesync.projections.receipts import ReceiptsProjection
from tidesync.target.contract import TRIGGER_MODIFIED, TargetOutcomeKind
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table, inspect_mysql_table
from tidesync.target.table_state import status_lines

pytestmark = pytest.mark.services

RENTAL_DDL = ("CREATE TABLE rental (rental_id INT PRIMARY KEY, rental_date DATETIME NOT NULL,"
              " customer_id INT NOT NULL, return_date DATETIME NULL) ENGINE=InnoDB")
STAMP_RENTAL_DATE = ("CREATE TRIGGER rental_date BEFORE INSERT ON rental FOR EACH ROW"
                     " SET NEW.rental_date = NOW()")
GUARDED_STAMP = ("CREATE TRIGGER rental_date BEFORE INSERT ON rental FOR EACH ROW"
                 " IF COALESCE(@tidesync_remote_apply, 0) = 0 THEN"
                 " SET NEW.rental_date = NOW(); END IF")
AUDIT = ("CREATE TRIGGER rental_gone AFTER DELETE ON rental FOR EACH ROW"
         " SET @rentals_deleted = COALESCE(@rentals_deleted, 0) + 1")


def _rental_db(instance: MariaDBInstance, make_database: Any, *triggers: str) -> str:
    database = make_database(instance)
    run_sql(instance, database, RENTAL_DDL, *triggers)
    connection = instance.connect(database)
    try:
        enable_mysql_table(connection, database, "rental", SHORE)
    finally:
        connection.close()
    return database


def _applier(instance: MariaDBInstance) -> MySQLTargetApplier:
    return MySQLTargetApplier(host=instance.host, port=instance.port, user=instance.user,
                              password=instance.password, node_id=SHORE)


def _a_month_ago() -> dt.datetime:
    return (dt.datetime.now(dt.UTC) - dt.timedelta(days=30)).replace(microsecond=0)


def test_enable_and_status_list_the_business_triggers(shore_mariadb, make_mariadb_database,
                                                      monkeypatch, capsys):
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, RENTAL_DDL, STAMP_RENTAL_DATE, AUDIT)
    for name, value in (("HOST", shore_mariadb.host), ("PORT", str(shore_mariadb.port)),
                        ("USER", shore_mariadb.user), ("NODE_ID", SHORE)):
        monkeypatch.setenv(f"TIDESYNC_TARGET__{name}", value)

    assert cli_main(["target", "enable", f"{database}.rental"]) == 0
    out = capsys.readouterr().out
    assert ("note: business trigger rental_date (BEFORE INSERT): fires again when a row from"
            " another node is applied unless guarded") in out
    assert "note: business trigger rental_gone (AFTER DELETE)" in out
    assert "tidesync_rental_bi" not in out.split("note:", 1)[1]  # ours are not business ones

    assert cli_main(["target", "status", f"{database}.rental"]) == 0
    out = capsys.readouterr().out
    assert "  business trigger rental_date (BEFORE INSERT): fires again" in out
    assert "  business trigger rental_gone (AFTER DELETE)" in out


def test_a_row_changed_by_a_business_trigger_is_applied_and_marked(
        shore_mariadb, make_mariadb_database, caplog):
    database = _rental_db(shore_mariadb, make_mariadb_database, STAMP_RENTAL_DATE, AUDIT)
    applier = _applier(shore_mariadb)
    rented = _a_month_ago()
    row = {"rental_id": 1, "rental_date": rented, "customer_id": 7, "return_date": None}
    event = insert(database, "rental", row, key="rental_id")
    try:
        with caplog.at_level(logging.WARNING, logger="tidesync.target.cas"):
            [outcome] = applier.apply_chunk([event])
        # An update that does not write rental_date is not marked (the trigger is on INSERT).
        changed = update(database, "rental", row, {"customer_id": 8}, event.result_revision,
                         key="rental_id")
        [second] = applier.apply_chunk([changed])
    finally:
        applier.close()

    assert outcome.kind is TargetOutcomeKind.APPLIED
    assert outcome.reason_code == f"{TRIGGER_MODIFIED}:rental_date"
    assert outcome.trigger_modified == ("rental_date",)
    assert "rental_date" in outcome.detail
    # The trigger's value stands (the row was written, then changed by the trigger).
    assert run_sql(shore_mariadb, database,
                   "SELECT rental_date > NOW() - INTERVAL 1 DAY FROM rental") == [(1,)]
    assert (str(event.event_id),) in run_sql(shore_mariadb, database,
                                             "SELECT event_id FROM _sync_applied")
    warnings = [r.getMessage() for r in caplog.records if "business trigger" in r.getMessage()]
    assert warnings and "rental_date" in warnings[0] and "rental" in warnings[0]
    assert rented.isoformat()[:10] not in warnings[0]  # never a value
    assert (second.kind, second.reason_code) == (TargetOutcomeKind.APPLIED, "")


def test_a_guarded_trigger_leaves_applied_rows_as_written(shore_mariadb,
                                                         make_mariadb_database):
    database = _rental_db(shore_mariadb, make_mariadb_database, GUARDED_STAMP)
    applier = _applier(shore_mariadb)
    rented = _a_month_ago()
    event = insert(database, "rental", {"rental_id": 1, "rental_date": rented,
                                        "customer_id": 7, "return_date": None},
                   key="rental_id")
    try:
        [outcome] = applier.apply_chunk([event])
    finally:
        applier.close()
    assert (outcome.kind, outcome.reason_code) == (TargetOutcomeKind.APPLIED, "")
    assert run_sql(shore_mariadb, database,
                   "SELECT rental_date FROM rental WHERE rental_id = 1") == [
        (rented.replace(tzinfo=None),)]
    # A local write still runs the trigger.
    run_sql(shore_mariadb, database, "INSERT INTO rental VALUES (2, '2001-01-01', 1, NULL)")
    assert run_sql(shore_mariadb, database,
                   "SELECT YEAR(rental_date) > 2001 FROM rental WHERE rental_id = 2") == [(1,)]


def test_tables_without_business_triggers_are_not_read_back(shore_mariadb,
                                                           make_mariadb_database):
    database = _rental_db(shore_mariadb, make_mariadb_database, AUDIT)
    connection = shore_mariadb.connect(database)
    try:
        with connection.cursor() as cursor:
            state = inspect_mysql_table(cursor, database, "rental")
    finally:
        connection.close()
    # An AFTER trigger cannot change the row it fires on in MySQL/MariaDB.
    assert state.shape().trigger_rewrites == frozenset()
    assert [line for line in status_lines(state) if "business trigger" in line] == [
        "  business trigger rental_gone (AFTER DELETE): fires again when a row from another"
        " node is applied unless guarded (docs/shore.md, Business triggers)"]


def test_the_marker_reaches_the_jobs_result_and_the_receipt(shore, shore_mariadb,  # noqa: F811
                                                            make_mariadb_database):
    pool, apps = shore
    database = make_mariadb_database(shore_mariadb)
    run_sql(shore_mariadb, database, ITEMS_DDL,
            "CREATE TRIGGER items_upper BEFORE INSERT ON items FOR EACH ROW"
            " SET NEW.name = UPPER(NEW.name)")
    connection = shore_mariadb.connect(database)
    try:
        enable_mysql_table(connection, database, "items", "shore")
    finally:
        connection.close()
    ship = ShipLog(node(), "shipdb")
    events = [ship.insert(1, "anchor", 3, "10.50"), ship.insert(2, "ROPE", 7, "2.25")]
    receive(pool, ship.node_id, events)
    processor = make_processor(shore, make_applier(shore_mariadb, database), ManualClock())

    assert drain(processor) == 2

    with pool.connection() as conn:
        rows = dict(conn.execute(
            "SELECT event_id, reason_code FROM inbox_event WHERE origin_node_id = %s"
            " AND result = 'APPLIED'", (ship.node_id,)).fetchall())
    assert rows == {events[0].event_id: f"{TRIGGER_MODIFIED}:name", events[1].event_id: None}
    receipts = PostgresProjectionRunner(ReceiptsProjection(), apps.apply_jobs, pool)
    receipts.run_until_idle()
    with pool.connection() as conn:
        got = conn.execute("SELECT event_id, result, reason_code FROM receipt"
                           " WHERE origin_node_id = %s ORDER BY seq", (ship.node_id,)).fetchall()
    assert got == [(events[0].event_id, "APPLIED", f"{TRIGGER_MODIFIED}:name"),
                   (events[1].event_id, "APPLIED", None)]

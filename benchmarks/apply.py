"""Applying UPDATE events: the whole apply processor (claim, compare-and-set, ledger, ApplyJob
streams, inbox finalize) and the target applier alone, versus raw compare-and-set updates; and
inserts into tables related by a foreign key applied in commit order from one topic, versus
the same inserts from a topic per table applied in parallel (see `_apply_grouped`).

Starts a private MariaDB and a fresh PostgreSQL database; every path updates the same number of
rows, 500 per transaction. The ratio is the processor's; it runs with the garbage collector
set up as `tidesync shore work` sets it once started, the other paths with Python's defaults.
"""

from __future__ import annotations

import datetime as dt
import gc
import uuid
from typing import Any

from psycopg_pool import ConnectionPool

from benchmarks import _apply_grouped, baselines
from benchmarks.harness import Report, timed
from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
)
from tidesync.localservices import MariaDBInstance, PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.shore.processor import ApplyProcessor
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.shore.worker import ShoreApps, settle_startup_heap
from tidesync.target.contract import TargetOutcomeKind
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table

BATCH = 500
FULL_ROWS = 10_000
TABLE = "apply_rows"
SHIP = "ship-0042"
SHORE = "shore-hq"
_CAPTURED_AT = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)


def run(report: Report, quick: bool = False) -> None:
    n = FULL_ROWS // 5 if quick else FULL_ROWS
    repeats = 1 if quick else 3
    with MariaDBInstance(server_id=302, buffer_pool="256M") as mariadb:
        report.add("mariadb start", mariadb.startup_seconds, "s")
        database = mariadb.create_database("apply_bench")
        raw = ours = processor = per_table = grouped = 0.0
        # Alternate the paths so drift on a shared machine hits all alike.
        for _ in range(repeats):
            raw = max(raw, _raw(mariadb, database, n))
            ours = max(ours, _ours(mariadb, database, n))
            processor = max(processor, _processor(mariadb, database, n))
            per_table = max(per_table, _apply_grouped.per_table(mariadb, database, n))
            grouped = max(grouped, _apply_grouped.grouped(mariadb, database, n))
    report.add(f"raw CAS UPDATE ({n:,} rows, {BATCH}/txn)", raw, "rows/s")
    report.add(f"MySQLTargetApplier UPDATE events ({n:,}, chunks of {BATCH})", ours, "events/s")
    report.add(f"apply processor, inbox to finalized ({n:,}, {BATCH} per target txn)", processor,
               "events/s")
    report.add("applier alone ÷ raw", ours / raw, "")
    report.add(f"per-table topics, {_apply_grouped.WORKERS} workers ({n:,} inserts, 2 tables)",
               per_table, "events/s")
    report.add(f"one topic in commit order, FK child → parent ({n:,} inserts, txns of 2)",
               grouped, "events/s")
    report.add("grouped (FK-safe, commit order) ÷ per-table parallel", grouped / per_table, "")
    report.set_ratio(processor / raw, (
        "apply processor events/s (claim, CAS + ledger + triggers, ApplyJob events, inbox"
        " finalize; 500 per target transaction) ÷ raw compare-and-set UPDATE rows/s (500 per"
        " transaction)"
    ))


def _raw(mariadb: MariaDBInstance, database: str, n: int) -> float:
    connection: Any = mariadb.connect(database)
    try:
        return baselines.mariadb_cas_update(connection, n, batch=BATCH)
    finally:
        connection.close()


def _ours(mariadb: MariaDBInstance, database: str, n: int) -> float:
    revisions = _enabled_table(mariadb, database, n)
    events = [_update(database, key, revisions[key]) for key in range(n)]
    applier = MySQLTargetApplier(host=mariadb.host, port=mariadb.port, user=mariadb.user,
                                 password=mariadb.password, node_id=SHORE)
    try:
        applier.apply_chunk([])  # nothing: keeps connecting out of the timing below
        applier.current_row(database, TABLE, {"id": 0})
        with timed() as timing:
            for start in range(0, n, BATCH):
                outcomes = applier.apply_chunk(events[start:start + BATCH])
                if any(o.kind is not TargetOutcomeKind.APPLIED for o in outcomes):
                    raise baselines.BaselineFailed(f"an event was not applied near {start}")
    finally:
        applier.close()
    return n / timing.seconds


def _processor(mariadb: MariaDBInstance, database: str, n: int) -> float:
    revisions = _enabled_table(mariadb, database, n)
    events = [_update(database, key, revisions[key]) for key in range(n)]
    postgres = PostgresDatabase().create()
    try:
        migrate_postgres(postgres.dsn)
        with ConnectionPool(postgres.dsn, min_size=1, max_size=4, open=True) as pool:
            _apply_grouped.receive(pool, events, SHIP)
            apps = ShoreApps.open(postgres.eventsourcing_env())
            applier = MySQLTargetApplier(host=mariadb.host, port=mariadb.port,
                                         user=mariadb.user, password=mariadb.password,
                                         node_id=SHORE)
            processor = ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool),
                                       applier, lambda: dt.datetime.now(dt.UTC))
            try:
                applier.current_row(database, TABLE, {"id": 0})
                thresholds = gc.get_threshold()
                settle_startup_heap()  # as `tidesync shore work` does once started
                try:
                    with timed() as timing:
                        done = 0
                        while (count := processor.run_once()) > 0:
                            done += count
                finally:  # the other paths run with the interpreter's defaults
                    gc.unfreeze()
                    gc.set_threshold(*thresholds)
                if done != n:
                    raise baselines.BaselineFailed(f"processor finalized {done} of {n}")
            finally:
                applier.close()
                apps.close()
    finally:
        postgres.drop()
    return n / timing.seconds


def _enabled_table(mariadb: MariaDBInstance, database: str, n: int) -> dict[int, Revision]:
    """A fresh enabled table of n rows shaped like the baseline's; returns each row's revision."""
    connection: Any = mariadb.connect(database)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
            cursor.execute("DROP TABLE IF EXISTS _sync_applied")
            cursor.execute(f"CREATE TABLE {TABLE} (id BIGINT PRIMARY KEY,"
                           " v VARCHAR(64) NOT NULL) ENGINE=InnoDB")
            cursor.executemany(f"INSERT INTO {TABLE} (id, v) VALUES (%s, 'seed')",
                               [(key,) for key in range(n)])
        connection.commit()
        enable_mysql_table(connection, database, TABLE, SHORE)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id, _sync_revision FROM {TABLE}")
            return {int(key): Revision.parse(text) for key, text in cursor.fetchall()}
    finally:
        connection.close()


def _update(database: str, key: int, base: Revision) -> ChangeEvent:
    record = RecordKey.of(database, TABLE, {"id": key})
    coordinates = SourceCoordinates(SHIP, 0, f"cdc.{database}.{TABLE}", 0, key)
    return ChangeEvent(
        event_id=event_id_for(coordinates, record, Operation.UPDATE), origin_node_id=SHIP,
        source_connector_id=f"{SHIP}-mysql", source_topic=coordinates.topic,
        source_partition=0, source_position=key, record=record, operation=Operation.UPDATE,
        captured_at=_CAPTURED_AT, before={"id": key, "v": "seed"},
        after={"id": key, "v": "updated"}, base_revision=base,
        result_revision=Revision(uuid.uuid4().bytes),
    )

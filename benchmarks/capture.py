"""Built-in binlog capture: row changes/s from the MariaDB binlog to the broker, flushed, against
decoding the same binlog with mysql-replication's BinLogStreamReader alone.

Starts its own MariaDB and tansu broker. The workload is inserts then updates of a realistic
table enabled for two-way sync (metadata columns and triggers), 500 row changes per transaction.
"""

from __future__ import annotations

import datetime as dt
import random
from contextlib import ExitStack
from decimal import Decimal
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.harness import Report, best_of, timed
from tidesync.capture.binlog import BinlogSettings, MySQLBinlogCapture
from tidesync.capture.checkpointer import Checkpointer
from tidesync.capture.envelope_writer import DebeziumEnvelopeWriter
from tidesync.capture.positions import CapturePosition, SQLitePositionStore
from tidesync.capture.publisher import KafkaEnvelopePublisher
from tidesync.capture.settings import CaptureStart
from tidesync.localservices import MariaDBInstance, TansuBroker
from tidesync.target.mysql_schema import enable_mysql_table

FULL_ROWS = 20_000
BATCH = 500
CAPTURE_SERVER_ID = 9301
TABLE_DDL = """
CREATE TABLE maintenance_jobs (
  id BIGINT NOT NULL PRIMARY KEY,
  equipment VARCHAR(64) NOT NULL,
  status ENUM('OPEN','IN_PROGRESS','DONE') NOT NULL,
  priority TINYINT NOT NULL,
  estimated_hours DECIMAL(8,2) NULL,
  cost DECIMAL(12,2) NULL,
  due_date DATE NULL,
  started_at DATETIME(6) NULL,
  remarks TEXT NULL
) ENGINE=InnoDB
"""


def run(report: Report, quick: bool = False) -> None:
    rows = FULL_ROWS // 10 if quick else FULL_ROWS
    repeats = 1 if quick else 2
    with ExitStack() as services:
        mariadb = services.enter_context(MariaDBInstance(server_id=302))
        broker = services.enter_context(TansuBroker())
        workdir = Path(services.enter_context(TemporaryDirectory(prefix="tidesync-bench-")))
        database = mariadb.create_database("capture_bench")
        start, changes = _write_workload(mariadb, database, rows)
        report.add(f"binlog row changes ({rows // 2:,} inserts + {rows // 2:,} updates,"
                   f" {BATCH}/txn)", changes)
        raw = best_of(repeats, lambda: _raw_decode_rate(mariadb, database, start, changes))
        attempts = iter(range(repeats))
        ours = best_of(repeats, lambda: _capture_rate(
            mariadb, database, start, broker.bootstrap_servers, workdir, next(attempts)))
    report.add("raw BinLogStreamReader decode (rows read, no output)", raw, "row changes/s")
    report.add("tidesync capture binlog → broker (Debezium JSON, flushed)", ours,
               "row changes/s")
    report.set_ratio(ours / raw, (
        "capture row changes/s (binlog → Debezium records → idempotent producer, flushed and "
        "checkpointed) ÷ raw binlog decode row changes/s of the same changes"
    ))


def _write_workload(mariadb: MariaDBInstance, database: str, rows: int) -> tuple[str, int]:
    """Create and enable the table, then write the changes; returns the GTID state before."""
    connection: Any = mariadb.connect(database=database, autocommit=True)
    generator = random.Random(7)
    try:
        with connection.cursor() as cursor:
            cursor.execute(TABLE_DDL)
        enable_mysql_table(connection, database, "maintenance_jobs", "ship-0042")
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@gtid_binlog_pos")
            start = str(cursor.fetchone()[0])
            inserts = rows // 2
            for first in range(0, inserts, BATCH):
                cursor.executemany(
                    "INSERT INTO maintenance_jobs (id, equipment, status, priority,"
                    " estimated_hours, cost, due_date, started_at, remarks)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    [_job(generator, key) for key in range(first, min(first + BATCH, inserts))])
            for first in range(0, rows - inserts, BATCH):
                connection.begin()
                for key in range(first, min(first + BATCH, rows - inserts)):
                    cursor.execute("UPDATE maintenance_jobs SET status = 'DONE', cost = %s"
                                   " WHERE id = %s", (Decimal(generator.randint(0, 99999)) / 100,
                                                      key))
                connection.commit()
        return start, rows
    finally:
        connection.close()


def _job(generator: random.Random, key: int) -> tuple[object, ...]:
    day = dt.date(2025, 1, 1) + dt.timedelta(days=generator.randint(0, 365))
    return (key, f"pump-{generator.randint(1, 40)}", "OPEN", generator.randint(1, 5),
            Decimal(generator.randint(1, 4000)) / 100, Decimal(generator.randint(1, 10**6)) / 100,
            day, dt.datetime(2025, 3, 1, 8, 30, 15, generator.randint(0, 999999)),
            "replace seal and check alignment " * generator.randint(1, 3))


def _raw_decode_rate(mariadb: MariaDBInstance, database: str, start: str, rows: int) -> float:
    """Row changes/s decoding the binlog with BinLogStreamReader alone, reading every row.

    A blocking dump, stopped once every row is read: MariaDB ends a non-blocking GTID dump
    by resetting the connection, which can drop the tail.
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    stream = BinLogStreamReader(
        connection_settings={"host": mariadb.host, "port": mariadb.port, "user": mariadb.user,
                             "password": mariadb.password},
        server_id=CAPTURE_SERVER_ID + 50, only_events=[WriteRowsEvent, UpdateRowsEvent,
                                                       DeleteRowsEvent],
        only_schemas=[database], is_mariadb=True, auto_position=start, resume_stream=True,
        blocking=True, enable_logging=False,
    )
    count = 0
    with timed() as timing:
        try:
            while count < rows:
                count += len(stream.fetchone().rows)
        finally:
            stream.close()
    return count / timing.seconds


def _capture_rate(mariadb: MariaDBInstance, database: str, start: str, bootstrap: str,
                  workdir: Path, attempt: int) -> float:
    name = f"sync.cdc.bench{attempt}"
    store = SQLitePositionStore(workdir / f"position-{attempt}.sqlite")
    store.save(name, "mariadb", CapturePosition(gtid_state=start), dt.datetime.now(dt.UTC))
    publisher = KafkaEnvelopePublisher(bootstrap, partitions=1)
    settings = BinlogSettings(mariadb.host, mariadb.port, mariadb.user, mariadb.password,
                              CAPTURE_SERVER_ID + attempt, (database,),
                              start_from=CaptureStart.CURRENT)
    capture = MySQLBinlogCapture(settings, DebeziumEnvelopeWriter(name),
                                 Checkpointer(publisher, store, name, "mariadb"))
    try:
        with timed() as timing:
            stats = capture.run(until_caught_up=True)
    finally:
        publisher.close()
        store.close()
    return stats.row_changes / timing.seconds

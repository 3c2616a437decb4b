"""The raw baselines on this machine: PostgreSQL inserts, MariaDB compare-and-set, Kafka round trip.

Starts its own services (a fresh PostgreSQL database, one MariaDB, one tansu broker) and stops them.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Any

from benchmarks import baselines
from benchmarks.harness import Report
from tidesync.localservices import MariaDBInstance, PostgresDatabase, TansuBroker

PAYLOAD_SIZE = 1024
BATCH = 500
FULL_SIZES = {"pg_rows": 20_000, "mariadb_updates": 10_000, "kafka_records": 20_000}


def sizes(quick: bool) -> dict[str, int]:
    return {name: count // 10 if quick else count for name, count in FULL_SIZES.items()}


def run(report: Report, quick: bool = False) -> None:
    size = sizes(quick)
    with ExitStack() as services:
        database = services.enter_context(PostgresDatabase())
        mariadb = services.enter_context(MariaDBInstance(server_id=301))
        broker = services.enter_context(TansuBroker())
        report.add("mariadb start", mariadb.startup_seconds, "s")
        report.add("tansu broker start", broker.startup_seconds, "s")
        unnest, copy = _postgres(report, database, size["pg_rows"], repeats=1 if quick else 3)
        _mariadb(report, mariadb, size["mariadb_updates"])
        _kafka(report, broker, size["kafka_records"])
    report.set_ratio(unnest / copy, (
        "PostgreSQL unnest INSERT rows/s ÷ binary COPY rows/s (1 KiB rows, 500 per transaction):"
        " how close the preferred insert path comes to the bulk-load floor"
    ))


def _postgres(
    report: Report, database: PostgresDatabase, n: int, repeats: int,
) -> tuple[float, float]:
    rows = [os.urandom(PAYLOAD_SIZE) for _ in range(n)]
    with database.connect() as conn:
        # Alternate the two paths so drift on a shared machine hits both alike.
        unnest = copy = 0.0
        for _ in range(repeats):
            unnest = max(unnest, baselines.pg_unnest_insert(conn, rows, batch=BATCH))
            copy = max(copy, baselines.pg_binary_copy(conn, rows, batch=BATCH))
    report.add(f"pg unnest INSERT ON CONFLICT ({n:,} x 1 KiB, {BATCH}/txn)", unnest, "rows/s")
    report.add(f"pg binary COPY ({n:,} x 1 KiB, {BATCH}/txn)", copy, "rows/s")
    return unnest, copy


def _mariadb(report: Report, mariadb: MariaDBInstance, n: int) -> None:
    conn: Any = mariadb.connect(mariadb.create_database("baseline"))
    try:
        rate = baselines.mariadb_cas_update(conn, n, batch=BATCH)
    finally:
        conn.close()
    report.add(f"mariadb CAS UPDATE ({n:,} rows, {BATCH}/txn)", rate, "rows/s")


def _kafka(report: Report, broker: TansuBroker, n: int) -> None:
    broker.create_topic("baseline", partitions=1)
    rates = baselines.kafka_produce_consume(broker.bootstrap_servers, "baseline", n, PAYLOAD_SIZE)
    report.add(f"kafka produce, idempotent acks=all ({n:,} x 1 KiB)", rates.produce, "records/s")
    report.add("kafka consume (assigned, from the start)", rates.consume, "records/s")
    report.add("kafka produce + consume", rates.end_to_end, "records/s")

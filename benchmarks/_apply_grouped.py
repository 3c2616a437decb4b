"""The cost of applying tables related by foreign keys in source commit order.

Today's layout: one topic (partition) per table, applied in parallel by two workers, chunks
cut by size. Grouped: the same inserts of a parent and a child table in one topic in commit
order (each parent with its child as one source transaction), chunks cut at transaction
boundaries, the child table with a foreign key to the parent; two workers run here too, but
one partition is applied by one worker at a time. The per-table run writes tables without the
foreign key (with it, children that overtake their parents would wait for them).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg_pool import ConnectionPool

from benchmarks import baselines
from benchmarks.harness import timed
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
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue
from tidesync.shore.worker import ShoreApps
from tidesync.target.mysql import MySQLTargetApplier
from tidesync.target.mysql_schema import enable_mysql_table
from tidesync.wire.codec import build_batch, serialize_batch

SHIP = "ship-0043"
SHORE = "shore-hq"
WORKERS = 2
_BATCH = 500
_GIVE_UP_SECONDS = 600.0
_CAPTURED_AT = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)


def per_table(mariadb: MariaDBInstance, database: str, n: int) -> float:
    """Events/s of n inserts into two unrelated tables, a topic each, two workers."""
    _tables(mariadb, database, "free", foreign_key=False)
    parents, children = [], []
    for key in range(n // 2):
        parents.append(_insert(database, "parent_free", key, {"id": key, "v": "p"},
                               "cdc.parent_free", key, None))
        children.append(_insert(database, "child_free", key,
                                {"id": key, "parent_id": key, "v": "c"},
                                "cdc.child_free", key, None))
    return _apply(mariadb, [parents, children])


def grouped(mariadb: MariaDBInstance, database: str, n: int) -> float:
    """Events/s of the same inserts in one topic in commit order, a parent and its child per
    source transaction, the child's table referring to the parent's."""
    _tables(mariadb, database, "fk", foreign_key=True)
    events = []
    for key in range(n // 2):
        transaction = f"0-1-{key + 1}"
        events.append(_insert(database, "parent_fk", key, {"id": key, "v": "p"}, "cdc.db",
                              2 * key, transaction))
        events.append(_insert(database, "child_fk", key, {"id": key, "parent_id": key, "v": "c"},
                              "cdc.db", 2 * key + 1, transaction))
    return _apply(mariadb, [events])


def _apply(mariadb: MariaDBInstance, partitions: Sequence[list[ChangeEvent]]) -> float:
    total = sum(len(events) for events in partitions)
    postgres = PostgresDatabase().create()
    try:
        migrate_postgres(postgres.dsn)
        with ConnectionPool(postgres.dsn, min_size=1, max_size=8, open=True) as pool:
            for events in partitions:
                receive(pool, events)
            workers = [_worker(mariadb, postgres, pool, index) for index in range(WORKERS)]
            done = [0] * WORKERS
            deadline = time.monotonic() + _GIVE_UP_SECONDS
            try:
                def drain(index: int) -> None:
                    processor = workers[index][0]
                    while sum(done) < total and time.monotonic() < deadline:
                        count = processor.run_once()
                        done[index] += count
                        if count == 0:  # the other worker holds the partition left
                            time.sleep(0.005)

                threads = [threading.Thread(target=drain, args=(index,))
                           for index in range(WORKERS)]
                with timed() as timing:
                    for thread in threads:
                        thread.start()
                    for thread in threads:
                        thread.join()
            finally:
                for _, applier, apps in workers:
                    applier.close()
                    apps.close()
            if sum(done) != total:
                raise baselines.BaselineFailed(f"finalized {sum(done)} of {total}")
    finally:
        postgres.drop()
    return total / timing.seconds


def _worker(mariadb: MariaDBInstance, postgres: PostgresDatabase, pool: ConnectionPool[Any],
            index: int) -> tuple[ApplyProcessor, MySQLTargetApplier, ShoreApps]:
    apps = ShoreApps.open(postgres.eventsourcing_env())
    applier = MySQLTargetApplier(host=mariadb.host, port=mariadb.port, user=mariadb.user,
                                 password=mariadb.password, node_id=SHORE)
    processor = ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool),
                               applier, lambda: dt.datetime.now(dt.UTC),
                               ProcessorSettings(worker_id=f"bench-{index}"))
    return processor, applier, apps


def _tables(mariadb: MariaDBInstance, database: str, suffix: str, *, foreign_key: bool) -> None:
    connection: Any = mariadb.connect(database)
    parent, child = f"parent_{suffix}", f"child_{suffix}"
    reference = (f", FOREIGN KEY (parent_id) REFERENCES {parent} (id)" if foreign_key else "")
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {child}")
            cursor.execute(f"DROP TABLE IF EXISTS {parent}")
            cursor.execute("DROP TABLE IF EXISTS _sync_applied")
            cursor.execute(f"CREATE TABLE {parent} (id BIGINT PRIMARY KEY,"
                           " v VARCHAR(64) NOT NULL) ENGINE=InnoDB")
            cursor.execute(f"CREATE TABLE {child} (id BIGINT PRIMARY KEY,"
                           f" parent_id BIGINT NOT NULL, v VARCHAR(64) NOT NULL{reference})"
                           " ENGINE=InnoDB")
        connection.commit()
        for table in (parent, child):
            enable_mysql_table(connection, database, table, SHORE)
    finally:
        connection.close()


def _insert(database: str, table: str, key: int, row: dict[str, Any], topic: str,
            position: int, transaction: str | None) -> ChangeEvent:
    record = RecordKey.of(database, table, {"id": key})
    coordinates = SourceCoordinates(SHIP, 0, topic, 0, position)
    return ChangeEvent(
        event_id=event_id_for(coordinates, record, Operation.INSERT), origin_node_id=SHIP,
        source_connector_id=f"{SHIP}-mysql", source_topic=topic, source_partition=0,
        source_position=position, source_sequence=position + 1, record=record,
        operation=Operation.INSERT, captured_at=_CAPTURED_AT, before=None, after=row,
        base_revision=None, result_revision=Revision(uuid.uuid4().bytes),
        transaction_id=transaction, transaction_order=None if transaction is None else 1,
    )


def receive(pool: ConnectionPool[Any], events: list[ChangeEvent], ship: str = SHIP) -> None:
    """Record events from `ship` in the inbox as received batches of 500 (not timed)."""
    now = dt.datetime.now(dt.UTC)
    for start in range(0, len(events), _BATCH):
        chunk = events[start:start + _BATCH]
        batch_ref = uuid.uuid4()
        body = serialize_batch(build_batch(chunk, node_id=ship, batch_id=batch_ref,
                                           created_at=now))
        with pool.connection() as conn, conn.transaction():
            conn.execute("INSERT INTO inbox_batch (batch_ref, origin_node_id, client_batch_id,"
                         " body, event_count, received_at) VALUES (%s, %s, %s, %s, %s, %s)",
                         (batch_ref, ship, batch_ref.bytes, body, len(chunk), now))
            conn.cursor().executemany(
                "INSERT INTO inbox_event (origin_node_id, event_id, batch_ref, batch_index,"
                " source_topic, source_partition, source_position, source_sequence,"
                " replay_epoch, received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [(ship, e.event_id, batch_ref, i, e.source_topic, e.source_partition,
                  e.source_position, e.source_sequence, e.replay_epoch, now)
                 for i, e in enumerate(chunk)])

"""Helpers for shore tests: a migrated PostgreSQL pool, shore apps, events built like a ship's,
and receiving them into the inbox exactly as the ingress records them."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.localservices import MariaDBInstance, PostgresDatabase
from tidesync.migrations import migrate_postgres
from tidesync.shore.worker import ShoreApps
from tidesync.wire.codec import build_batch, serialize_batch

ITEMS_DDL = (
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL, qty INT NOT NULL,"
    " price DECIMAL(10,2) NOT NULL)"
)


@contextmanager
def migrated_pool(database: PostgresDatabase) -> Iterator[ConnectionPool]:
    migrate_postgres(database.dsn)
    pool = ConnectionPool(database.dsn, min_size=1, max_size=4, open=True)
    try:
        yield pool
    finally:
        pool.close()


@contextmanager
def shore_apps(database: PostgresDatabase) -> Iterator[ShoreApps]:
    apps = ShoreApps.open(database.eventsourcing_env())
    try:
        yield apps
    finally:
        apps.close()


def new_revision() -> Revision:
    return Revision(uuid.uuid4().bytes)


@dataclass
class ShipLog:
    """Builds the change events one ship would capture for the `items` table, with revisions
    chained per row, stable ids and contiguous source sequences per partition."""

    node_id: str
    database: str
    topic: str = "sync.cdc.test.items"
    partition: int = 0
    rows: dict[int, tuple[dict[str, object], Revision]] = field(default_factory=dict)
    offsets: Iterator[int] = field(default_factory=lambda: itertools.count(0))
    sequence: int = 0

    def _event(self, op: Operation, key: int, before: dict[str, object] | None,
               after: dict[str, object] | None, base: Revision | None,
               result: Revision | None) -> ChangeEvent:
        offset = next(self.offsets)
        self.sequence += 1
        record = RecordKey.of(self.database, "items", {"id": key})
        source = SourceCoordinates(self.node_id, 0, self.topic, self.partition, offset)
        event_id = event_id_for(source, record, op)
        if op is Operation.DELETE:
            result = tombstone_revision(event_id)
        return ChangeEvent(
            event_id=event_id, origin_node_id=self.node_id, source_connector_id="test",
            source_topic=self.topic, source_partition=self.partition, source_position=offset,
            record=record, operation=op, captured_at=dt.datetime(2019, 11, 1, tzinfo=dt.UTC),
            before=before, after=after, base_revision=base, result_revision=result,
            source_sequence=self.sequence,
        )

    def insert(self, key: int, name: str, qty: int, price: str) -> ChangeEvent:
        row = {"id": key, "name": name, "qty": qty, "price": Decimal(price)}
        revision = new_revision()
        self.rows[key] = (row, revision)
        return self._event(Operation.INSERT, key, None, row, None, revision)

    def update(self, key: int, **changes: object) -> ChangeEvent:
        row, base = self.rows[key]
        new_row = {**row, **changes}
        revision = new_revision()
        self.rows[key] = (new_row, revision)
        return self._event(Operation.UPDATE, key, row, new_row, base, revision)

    def delete(self, key: int) -> ChangeEvent:
        row, base = self.rows.pop(key)
        return self._event(Operation.DELETE, key, row, None, base, None)


def receive(pool: ConnectionPool, node_id: str, events: Sequence[ChangeEvent],
            received_at: dt.datetime | None = None) -> uuid.UUID:
    """Record events in the inbox as one received batch (what a RECEIVED answer means)."""
    received_at = received_at or dt.datetime.now(dt.UTC)
    batch_ref = uuid.uuid4()
    body = serialize_batch(build_batch(list(events), node_id=node_id, batch_id=batch_ref,
                                       created_at=received_at))
    with pool.connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO inbox_batch (batch_ref, origin_node_id, client_batch_id, body,"
            " event_count, received_at) VALUES (%s, %s, %s, %s, %s, %s)",
            (batch_ref, node_id, batch_ref.bytes, body, len(events), received_at))
        conn.cursor().executemany(
            "INSERT INTO inbox_event (origin_node_id, event_id, batch_ref, batch_index,"
            " source_topic, source_partition, source_position, source_sequence, replay_epoch,"
            " received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING",
            [(node_id, e.event_id, batch_ref, i, e.source_topic, e.source_partition,
              e.source_position, e.source_sequence, e.replay_epoch, received_at)
             for i, e in enumerate(events)])
    return batch_ref


def inbox_states(pool: ConnectionPool, node_id: str) -> dict[uuid.UUID, tuple[str, str | None]]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT event_id, state, result FROM inbox_event WHERE origin_node_id = %s",
            (node_id,)).fetchall()
    return {row[0]: (row[1], row[2]) for row in rows}


def ledger_ids(connection, database: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT event_id FROM `{database}`.`_sync_applied`")
        return [row[0] for row in cursor.fetchall()]


def chunks(items: Sequence[ChangeEvent], size: int) -> Iterable[Sequence[ChangeEvent]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def run_sql(instance: MariaDBInstance, database: str, *statements: str) -> list[tuple[Any, ...]]:
    """Run statements on a fresh autocommit connection; the rows of the last one."""
    connection = instance.connect(database, autocommit=True)
    try:
        with connection.cursor() as cursor:
            rows: list[tuple[Any, ...]] = []
            for statement in statements:
                cursor.execute(statement)
                rows = list(cursor.fetchall())
            return rows
    finally:
        connection.close()


def pg_rows(pool: ConnectionPool, sql: str, params: Sequence[object] = ()) -> list[tuple]:
    with pool.connection() as conn:
        return conn.execute(sql, params).fetchall()


__all__ = ["ITEMS_DDL", "ShipLog", "inbox_states", "ledger_ids", "migrated_pool", "pg_rows",
           "psycopg", "receive", "run_sql", "shore_apps"]


def use_event_store(monkeypatch: Any, database: PostgresDatabase) -> None:
    """Point the configuration a CLI command loads (its environment) at this database."""
    for name, value in (("KIND", "postgres"), ("POSTGRES_HOST", database.host),
                        ("POSTGRES_PORT", str(database.port)),
                        ("POSTGRES_DBNAME", database.dbname),
                        ("POSTGRES_USER", database.user),
                        ("POSTGRES_PASSWORD", database.password or "")):
        monkeypatch.setenv(f"TIDESYNC_EVENT_STORE__{name}", value)


def own_pg_database() -> Iterator[PostgresDatabase]:
    """A database of a module's own, for tests that release rules: once a rule is released in a
    database, the shore applies by rules there, which every other test sharing it would see.
    Use as `pg_database = pytest.fixture(scope="module", name="pg_database")(own_pg_database)`.
    """
    database = PostgresDatabase().create()
    try:
        yield database
    finally:
        database.drop()

"""Helpers for shore tests on the embedded SQLite store: one file holding the event streams,
the inbox and the views, and a SQLite business database as the target. No service needed."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidesync.bootstrap import event_store_env
from tidesync.config import EventStoreConfig, EventStoreKind
from tidesync.domain.change_event import ChangeEvent
from tidesync.ingress.database import SQLiteSyncDatabase
from tidesync.ingress.inbox import SQLiteInbox
from tidesync.migrations import migrate_sqlite
from tidesync.shore.work_queue import SQLiteWorkQueue
from tidesync.shore.worker import ShoreApps
from tidesync.sqlite_store import SQLiteConnections
from tidesync.target.schema import enable_sqlite_table
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.codec import build_batch, serialize_batch

# SQLite does not enforce VARCHAR lengths: the CHECK gives the target a permanent rejection.
SQLITE_ITEMS_DDL = (
    "CREATE TABLE items (id INTEGER PRIMARY KEY,"
    " name VARCHAR(20) NOT NULL CHECK (length(name) <= 20), qty INT NOT NULL,"
    " price DECIMAL(10,2) NOT NULL)"
)


@dataclass
class SQLiteShore:
    """The shore's SQLite event store file: its applications and tidesync's tables."""

    path: Path
    apps: ShoreApps
    connections: SQLiteConnections

    @property
    def store(self) -> EventStoreConfig:
        return EventStoreConfig(kind=EventStoreKind.SQLITE, sqlite_path=str(self.path))

    def queue(self) -> SQLiteWorkQueue:
        return SQLiteWorkQueue(self.connections)

    def rows(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self.connections.connection() as conn:
            return [tuple(row) for row in conn.execute(sql, params).fetchall()]

    def receive(self, node_id: str, events: Sequence[ChangeEvent],
                received_at: dt.datetime | None = None) -> pb.UploadBatchResponse:
        """Receive events as the ingress does (SQLiteInbox): one batch, one transaction."""
        received_at = received_at or dt.datetime.now(dt.UTC)
        batch = build_batch(list(events), node_id=node_id, batch_id=uuid.uuid4(),
                            created_at=received_at)
        inbox = SQLiteInbox(SQLiteSyncDatabase(str(self.path)))
        try:
            return inbox.receive(node_id, serialize_batch(batch), batch, received_at)
        finally:
            inbox.database.close()

    def inbox_states(self, node_id: str) -> dict[uuid.UUID, tuple[str, str | None]]:
        rows = self.rows("SELECT event_id, state, result FROM inbox_event"
                         " WHERE origin_node_id = ?", (node_id,))
        return {uuid.UUID(row[0]): (row[1], row[2]) for row in rows}


@contextlib.contextmanager
def sqlite_shore(path: Path) -> Iterator[SQLiteShore]:
    migrate_sqlite(str(path))
    store = EventStoreConfig(kind=EventStoreKind.SQLITE, sqlite_path=str(path))
    apps = ShoreApps.open(event_store_env(store))
    connections = SQLiteConnections(str(path))
    try:
        yield SQLiteShore(path, apps, connections)
    finally:
        connections.close()
        apps.close()


def make_sqlite_target(path: Path, node_id: str = "shore") -> Path:
    """A SQLite business database with the `items` table enabled for sync."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(SQLITE_ITEMS_DDL)
        enable_sqlite_table(conn, "items", node_id)
    return path


def target_rows(path: Path, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        return conn.execute(sql, params).fetchall()


def target_items(path: Path) -> dict[int, tuple[Any, ...]]:
    rows = target_rows(path, "SELECT id, name, qty, price, _sync_revision, _sync_origin,"
                             " _sync_event_id FROM items")
    return {row[0]: row[1:] for row in rows}


def target_ledger(path: Path) -> list[str]:
    return [row[0] for row in target_rows(path, "SELECT event_id FROM _sync_applied")]

"""One-way tables (UPLINK on the shore, DOWNLINK on a ship) in a SQLite file: preparing them
and applying to them by key.

The SQLite twin of `one_way_mysql`: `enable_one_way_sqlite` creates the `_sync_applied`
ledger and the `_sync_key_position` table and leaves the business table alone; rows are
upserted with `INSERT … ON CONFLICT (primary key) DO UPDATE`.
"""

from __future__ import annotations

import datetime as dt
import logging
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tidesync.domain.clock import Clock, utc_now
from tidesync.target.cas import reject_template
from tidesync.target.contract import (
    LEDGER_TABLE,
    RejectReason,
    Route,
    TargetError,
    TargetOutcome,
)
from tidesync.target.one_way import (
    KEY_POSITION_TABLE,
    OneWayApplier,
    OneWayShape,
    OneWayWrite,
    SourcePosition,
)
from tidesync.target.sqlite import MAIN, in_main_database, map_sqlite_error, sqlite_param
from tidesync.target.sqlite_schema import inspect_sqlite_table, sqlite_quote
from tidesync.target.table_state import EnableReport, SchemaError, check_node_id

log = logging.getLogger(__name__)
T = TypeVar("T")

_LOOKUP_BATCH = 500
_LEDGER_DDL = (
    f"CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (event_id CHAR(36) NOT NULL PRIMARY KEY,"
    " origin_node_id VARCHAR(64) NOT NULL, table_name VARCHAR(64) NOT NULL,"
    " applied_at DATETIME(6) NOT NULL)")
_POSITION_DDL = (
    f"CREATE TABLE IF NOT EXISTS {KEY_POSITION_TABLE} (table_name VARCHAR(64) NOT NULL,"
    " key_digest CHAR(64) NOT NULL, origin_node_id VARCHAR(64) NOT NULL,"
    " source_topic VARCHAR(255) NOT NULL, source_partition BIGINT NOT NULL,"
    " replay_epoch BIGINT NOT NULL, source_position BIGINT NOT NULL,"
    " event_id CHAR(36) NOT NULL, updated_at DATETIME(6) NOT NULL,"
    " PRIMARY KEY (table_name, key_digest))")
_POSITION_COLUMNS = ("origin_node_id", "source_topic", "source_partition", "replay_epoch",
                     "source_position")
_DATETIME_TEXT = "%Y-%m-%d %H:%M:%S.%f"


def _support_tables(connection: sqlite3.Connection) -> set[str]:
    return {str(name) for (name,) in connection.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name IN (?, ?)",
        (LEDGER_TABLE, KEY_POSITION_TABLE))}


def enable_one_way_sqlite(connection: sqlite3.Connection, table: str,
                          direction: str = "UPLINK") -> EnableReport:
    """Prepare a table for one-way apply, in one transaction: the ledger and the key-position
    table, nothing on the table itself. `connection` must be in autocommit mode."""
    report = EnableReport(MAIN, table)
    connection.execute("BEGIN IMMEDIATE")
    try:
        state = inspect_sqlite_table(connection, table)
        if not state.exists:
            raise SchemaError(f"table {table} does not exist")
        if not state.primary_key:
            raise SchemaError(f"table {table} has no primary key")
        present = _support_tables(connection)
        for name, ddl in ((LEDGER_TABLE, _LEDGER_DDL), (KEY_POSITION_TABLE, _POSITION_DDL)):
            if name in present:
                report.actions.append(f"unchanged: {name} present")
                continue
            connection.execute(ddl)
            report.actions.append(f"created {name}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    report.notes.append(f"one-way ({direction}): no metadata columns or triggers on"
                        " the table")
    return report


class SQLiteOneWayApplier(OneWayApplier):
    """Applies one-way events to tables of one SQLite file prepared by
    `enable_one_way_sqlite` (write transactions `BEGIN IMMEDIATE`; one thread at a time)."""

    def __init__(self, path: str | Path, *, node_id: str, route: Route = in_main_database,
                 clock: Clock = utc_now, busy_timeout: float = 10.0) -> None:
        super().__init__(check_node_id(node_id), route, clock)
        self._path = str(path)
        self._busy_timeout = busy_timeout
        self._connection: sqlite3.Connection | None = None
        self._statements: dict[tuple[object, ...], str] = {}

    def _call(self, action: Callable[[], T], *, commit: bool = False,
              statement: bool = False) -> T:
        try:
            return action()
        except (sqlite3.Error, OverflowError) as error:
            mapped = map_sqlite_error(error, during_commit=commit, in_statement=statement)
            if isinstance(mapped, TargetError):
                log.warning("target SQLite call failed: %s", mapped.reason_code)
            raise mapped from error

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            self._connection = self._call(self._connect)
        return self._connection

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self._path, timeout=self._busy_timeout,
                                     isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA foreign_keys = ON")
        return connection

    def _execute(self, statement: str, params: Sequence[object] = (), *,
                 for_event: bool = False) -> int:
        db = self._db()
        return self._call(lambda: db.execute(statement, params).rowcount, statement=for_event)

    def _query(self, statement: str, params: Sequence[object] = ()) -> list[Any]:
        db = self._db()
        return self._call(lambda: db.execute(statement, params).fetchall())

    # -- OneWayApplier primitives -------------------------------------------------------------

    def _inspect(self, database: str, table: str) -> OneWayShape | TargetOutcome:
        if database != MAIN:
            return reject_template(RejectReason.UNKNOWN_DATABASE,
                                   f"SQLite targets have only the {MAIN} database")
        db = self._db()
        state = self._call(lambda: inspect_sqlite_table(db, table))
        present = self._call(lambda: _support_tables(db))
        if not state.exists:
            return reject_template(RejectReason.UNKNOWN_TABLE, f"table {table} does not exist")
        if not state.primary_key or present != {LEDGER_TABLE, KEY_POSITION_TABLE}:
            return reject_template(RejectReason.TABLE_NOT_ENABLED,
                                   f"table {table} is not prepared for one-way sync"
                                   " (tidesync target enable --direction UPLINK,"
                                   " or DOWNLINK on a ship)")
        return OneWayShape(state.shape())

    def _begin(self) -> None:
        self._execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        db = self._db()
        self._call(lambda: db.execute("COMMIT"), commit=True)

    def _rollback(self) -> None:
        db = self._connection
        if db is not None and db.in_transaction:
            try:
                self._call(lambda: db.execute("ROLLBACK"))
            except TargetError:
                log.warning("rollback failed; closing the target database connection")
                self.close()

    def _ledger_holds(self, database: str, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        found: set[uuid.UUID] = set()
        for start in range(0, len(event_ids), _LOOKUP_BATCH):
            batch = [str(event_id) for event_id in event_ids[start:start + _LOOKUP_BATCH]]
            rows = self._query(f"SELECT event_id FROM {LEDGER_TABLE} WHERE event_id IN"  # noqa: S608
                               f" ({', '.join(['?'] * len(batch))})", batch)
            found.update(uuid.UUID(str(event_id)) for (event_id,) in rows)
        return found

    def _positions(self, database: str, table: str,
                   digests: Sequence[str]) -> dict[str, SourcePosition]:
        found: dict[str, SourcePosition] = {}
        for start in range(0, len(digests), _LOOKUP_BATCH):
            batch = list(digests[start:start + _LOOKUP_BATCH])
            rows = self._query(
                f"SELECT key_digest, {', '.join(_POSITION_COLUMNS)}"  # noqa: S608
                f" FROM {KEY_POSITION_TABLE} WHERE table_name = ? AND key_digest IN"
                f" ({', '.join(['?'] * len(batch))})", [table, *batch])
            for digest, origin, topic, partition, epoch, position in rows:
                found[str(digest)] = SourcePosition(str(origin), str(topic), int(partition),
                                                    int(epoch), int(position))
        return found

    def _upsert(self, write: OneWayWrite) -> None:
        shape = write.shape.table
        cache_key = ("upsert", shape.table, write.columns)
        text = self._statements.get(cache_key)
        if text is None:
            updates = [f"{sqlite_quote(column)} = excluded.{sqlite_quote(column)}"
                       for column in write.columns if column not in shape.key_columns]
            action = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
            text = self._statements[cache_key] = (
                f"INSERT INTO {sqlite_quote(shape.table)}"  # noqa: S608
                f" ({', '.join(sqlite_quote(column) for column in write.columns)})"
                f" VALUES ({', '.join(['?'] * len(write.columns))})"
                f" ON CONFLICT ({', '.join(sqlite_quote(c) for c in shape.primary_key)})"
                f" {action}")
        self._execute(text, [sqlite_param(value) for value in write.values], for_event=True)

    def _update(self, write: OneWayWrite) -> int:
        shape = write.shape.table
        key = [sqlite_param(value) for value in write.key]
        changes = [(column, sqlite_param(value))
                   for column, value in zip(write.columns, write.values, strict=True)
                   if column not in shape.key_columns]
        where = f" WHERE {' AND '.join(f'{sqlite_quote(c)} = ?' for c in shape.primary_key)}"
        if not changes:
            return len(self._query(f"SELECT 1 FROM {sqlite_quote(shape.table)}{where}", key))  # noqa: S608
        return self._execute(
            f"UPDATE {sqlite_quote(shape.table)} SET"  # noqa: S608
            f" {', '.join(f'{sqlite_quote(column)} = ?' for column, _ in changes)}{where}",
            [*(param for _, param in changes), *key], for_event=True)

    def _delete(self, write: OneWayWrite) -> None:
        shape = write.shape.table
        self._execute(f"DELETE FROM {sqlite_quote(shape.table)} WHERE"  # noqa: S608
                      f" {' AND '.join(f'{sqlite_quote(c)} = ?' for c in shape.primary_key)}",
                      [sqlite_param(value) for value in write.key], for_event=True)

    def _save_position(self, write: OneWayWrite, now: dt.datetime) -> None:
        source = write.source
        self._execute(
            f"INSERT INTO {KEY_POSITION_TABLE} (table_name, key_digest,"  # noqa: S608
            f" {', '.join(_POSITION_COLUMNS)}, event_id, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (table_name, key_digest) DO UPDATE"
            f" SET {', '.join(f'{name} = excluded.{name}' for name in _POSITION_COLUMNS)},"
            " event_id = excluded.event_id, updated_at = excluded.updated_at",
            [write.table, write.digest, source.origin_node_id, source.topic, source.partition,
             source.replay_epoch, source.position, str(write.event.event_id),
             _datetime_text(now)])

    def _insert_ledger(self, database: str, writes: Sequence[OneWayWrite],
                       now: dt.datetime) -> None:
        applied_at = _datetime_text(now)
        rows = [(str(write.event.event_id), write.event.origin_node_id, write.table, applied_at)
                for write in writes]
        db = self._db()
        self._call(lambda: db.executemany(
            f"INSERT INTO {LEDGER_TABLE} (event_id, origin_node_id, table_name, applied_at)"  # noqa: S608
            " VALUES (?, ?, ?, ?)", rows))

    # -- the rest of TargetApplier ------------------------------------------------------------

    def applied_event_ids(self, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        if not event_ids or not self._query(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (LEDGER_TABLE,)):
            return set()
        return self._ledger_holds(MAIN, event_ids)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _datetime_text(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime(_DATETIME_TEXT)

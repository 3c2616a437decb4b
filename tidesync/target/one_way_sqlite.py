"""One-way tables (UPLINK on the shore, DOWNLINK on a ship) in a SQLite file: preparing them
and applying to them by key.

The SQLite twin of `one_way_mysql`: `enable_one_way_sqlite` creates the `_sync_applied`
ledger and the `_sync_key_position` table and leaves the business table alone; rows are
upserted with `INSERT … ON CONFLICT (primary key) DO UPDATE`.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from tidesync.domain.clock import Clock, utc_now
from tidesync.target.cas import reject_template
from tidesync.target.contract import (
    LEDGER_TABLE,
    RejectReason,
    Route,
    TargetOutcome,
)
from tidesync.target.one_way import (
    KEY_POSITION_TABLE,
    POSITION_COLUMNS,
    OneWayApplier,
    OneWayShape,
    OneWayWrite,
    SourcePosition,
    not_prepared,
    position_row,
    read_positions,
)
from tidesync.target.sqlite import (
    MAIN,
    SQLiteSession,
    datetime_text,
    in_main_database,
    sqlite_param,
)
from tidesync.target.sqlite_schema import inspect_sqlite_table, sqlite_quote
from tidesync.target.table_state import EnableReport, SchemaError, check_node_id

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


class SQLiteOneWayApplier(SQLiteSession, OneWayApplier):
    """Applies one-way events to tables of one SQLite file prepared by
    `enable_one_way_sqlite` (write transactions `BEGIN IMMEDIATE`; one thread at a time)."""

    def __init__(self, path: str | Path, *, node_id: str, route: Route = in_main_database,
                 clock: Clock = utc_now, busy_timeout: float = 10.0) -> None:
        super().__init__(check_node_id(node_id), route, clock)
        self._open_session(path, busy_timeout)

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
            return not_prepared(table)
        return OneWayShape(state.shape())

    def _positions(self, database: str, table: str,
                   digests: Sequence[str]) -> dict[str, SourcePosition]:
        found: dict[str, SourcePosition] = {}
        for start in range(0, len(digests), _LOOKUP_BATCH):
            batch = list(digests[start:start + _LOOKUP_BATCH])
            rows = self._query(
                f"SELECT key_digest, {', '.join(POSITION_COLUMNS)}"  # noqa: S608
                f" FROM {KEY_POSITION_TABLE} WHERE table_name = ? AND key_digest IN"
                f" ({', '.join(['?'] * len(batch))})", [table, *batch])
            found.update(read_positions(rows))
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
        changes = [(column, sqlite_param(value)) for column, value in write.changes]
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
        self._execute(
            f"INSERT INTO {KEY_POSITION_TABLE} (table_name, key_digest,"  # noqa: S608
            f" {', '.join(POSITION_COLUMNS)}, event_id, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (table_name, key_digest) DO UPDATE"
            f" SET {', '.join(f'{name} = excluded.{name}' for name in POSITION_COLUMNS)},"
            " event_id = excluded.event_id, updated_at = excluded.updated_at",
            position_row(write, datetime_text(now)))

    def _insert_ledger(self, database: str, writes: Sequence[OneWayWrite],
                       now: dt.datetime) -> None:
        self._insert_ledger_rows(((write.event.event_id, write.event.origin_node_id, write.table)
                            for write in writes), now)

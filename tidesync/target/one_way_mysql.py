"""One-way tables (UPLINK on the shore, DOWNLINK on a ship) on MySQL/MariaDB: preparing them
and applying to them by key.

`enable_one_way_mysql` creates only what the applier needs beside the table: the
`_sync_applied` ledger and the `_sync_key_position` table, in the table's database. The
business table itself is left alone (no metadata columns, no triggers).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from tidesync.domain.clock import Clock, utc_now
from tidesync.target.cas import DuplicatePrimaryKey, reject_template
from tidesync.target.contract import (
    LEDGER_TABLE,
    RejectReason,
    Route,
    TargetOutcome,
    TransientTargetError,
    same_names,
)
from tidesync.target.mysql_schema import inspect_mysql_table, mysql_quote
from tidesync.target.mysql_session import MySQLSession, sql_qualified
from tidesync.target.mysql_statements import sql_name
from tidesync.target.mysql_values import mysql_param
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
from tidesync.target.table_state import EnableReport, SchemaError, check_node_id

_LOOKUP_BATCH = 1000
_LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " event_id CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY,"
    " origin_node_id VARCHAR(64) NOT NULL,"
    " table_name VARCHAR(64) NOT NULL,"
    " applied_at DATETIME(6) NOT NULL"
    ") ENGINE=InnoDB"
)
_POSITION_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " table_name VARCHAR(64) NOT NULL,"
    " key_digest CHAR(64) CHARACTER SET ascii NOT NULL,"
    " origin_node_id VARCHAR(64) NOT NULL,"
    " source_topic VARCHAR(255) NOT NULL,"
    " source_partition BIGINT NOT NULL,"
    " replay_epoch BIGINT NOT NULL,"
    " source_position BIGINT NOT NULL,"
    " event_id CHAR(36) CHARACTER SET ascii NOT NULL,"
    " updated_at DATETIME(6) NOT NULL,"
    " PRIMARY KEY (table_name, key_digest)"
    ") ENGINE=InnoDB"
)


def _support_tables(cursor: Any, database: str) -> set[str]:
    cursor.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s"
                   " AND TABLE_NAME IN (%s, %s)", (database, LEDGER_TABLE, KEY_POSITION_TABLE))
    return {str(name) for (name,) in cursor.fetchall()}


def _other_unique_keys(cursor: Any, database: str, table: str) -> bool:
    cursor.execute("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s"
                   " AND TABLE_NAME = %s AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY'",
                   (database, table))
    return int(cursor.fetchone()[0]) > 0


def enable_one_way_mysql(connection: Any, database: str, table: str,
                         direction: str = "UPLINK") -> EnableReport:
    """Prepare a table for one-way apply: the ledger and the key-position table, nothing on
    the table itself. Idempotent; `connection` is a pymysql connection."""
    report = EnableReport(database, table)
    with connection.cursor() as cursor:
        state = inspect_mysql_table(cursor, database, table)
        if not state.exists:
            raise SchemaError(f"table {database}.{table} does not exist")
        if not state.primary_key:
            raise SchemaError(f"table {database}.{table} has no primary key")
        present = _support_tables(cursor, database)
        for name, ddl in ((LEDGER_TABLE, _LEDGER_DDL), (KEY_POSITION_TABLE, _POSITION_DDL)):
            if name in present:
                report.actions.append(f"unchanged: {name} present")
                continue
            cursor.execute(ddl.format(table=f"{mysql_quote(database)}.{mysql_quote(name)}"))
            report.actions.append(f"created {database}.{name}")
    connection.commit()
    report.notes.append(f"one-way ({direction}): no metadata columns or triggers on"
                        " the table")
    return report


class MySQLOneWayApplier(MySQLSession, OneWayApplier):
    """Applies one-way events to MySQL/MariaDB tables prepared by `enable_one_way_mysql`.

    One connection (autocommit off, CLIENT.FOUND_ROWS so an UPDATE counts matched rows), UTC
    session time zone, strict SQL mode, READ COMMITTED. A row is upserted with
    `INSERT … ON DUPLICATE KEY UPDATE`; on a table with another unique index, which that
    statement would let pick the row, with an UPDATE by primary key and, when it matched
    nothing, an INSERT.
    """

    def __init__(
        self, *, host: str, port: int, user: str, password: str, node_id: str,
        database: str | None = None, route: Route = same_names, clock: Clock = utc_now,
        lock_wait_timeout: int = 20, connect_timeout: float = 10.0,
        read_timeout: float = 60.0, write_timeout: float = 60.0,
    ) -> None:
        super().__init__(check_node_id(node_id), route, clock)
        self._open_session(
            host=host, port=port, user=user, password=password, database=database,
            client_flag=0, lock_wait_timeout=lock_wait_timeout,
            connect_timeout=connect_timeout, read_timeout=read_timeout,
            write_timeout=write_timeout)

    # -- OneWayApplier primitives -------------------------------------------------------------

    def _inspect(self, database: str, table: str) -> OneWayShape | TargetOutcome:
        if max(map(ord, database + table), default=0) > 0xFFFF:
            return reject_template(RejectReason.INVALID_NAME,
                                   "a database or table name MySQL cannot hold")
        cursor = self._cursor()
        state = self._call(lambda: inspect_mysql_table(cursor, database, table))
        present = self._call(lambda: _support_tables(cursor, database))
        unique = self._call(lambda: _other_unique_keys(cursor, database, table))
        self._rollback()
        if not state.exists:
            return reject_template(RejectReason.UNKNOWN_TABLE, f"table {table} does not exist")
        if not state.primary_key or present != {LEDGER_TABLE, KEY_POSITION_TABLE}:
            return not_prepared(table)
        return OneWayShape(state.shape(), other_unique_keys=unique)

    def _positions(self, database: str, table: str,
                   digests: Sequence[str]) -> dict[str, SourcePosition]:
        found: dict[str, SourcePosition] = {}
        positions = sql_qualified(database, KEY_POSITION_TABLE)
        for start in range(0, len(digests), _LOOKUP_BATCH):
            batch = list(digests[start:start + _LOOKUP_BATCH])
            rows = self._query(
                f"SELECT key_digest, {', '.join(POSITION_COLUMNS)} FROM {positions}"  # noqa: S608
                f" WHERE table_name = %s AND key_digest IN ({', '.join(['%s'] * len(batch))})",
                [table, *batch])
            found.update(read_positions(rows))
        return found

    def _upsert(self, write: OneWayWrite) -> None:
        shape = write.shape.table
        params = [mysql_param(value) for value in write.values]
        if not write.shape.other_unique_keys:
            self._execute(self._upsert_text(write), params, for_event=True)
            return
        if self._update(write):
            return
        try:
            self._execute(f"INSERT INTO {sql_qualified(shape.database, shape.table)}"  # noqa: S608
                          f" ({', '.join(sql_name(column) for column in write.columns)})"
                          f" VALUES ({', '.join(['%s'] * len(write.columns))})", params,
                          for_event=True)
        except DuplicatePrimaryKey:
            # The row appeared between the UPDATE and the INSERT: another writer; try again.
            raise TransientTargetError("DUPLICATE_KEY_RACE", "a row appeared meanwhile") from None

    def _update(self, write: OneWayWrite) -> int:
        shape = write.shape.table
        key = [mysql_param(value) for value in write.key]
        changes = [(column, mysql_param(value)) for column, value in write.changes]
        where = f" WHERE {_key_match(shape.primary_key)}"
        if not changes:
            return len(self._query(f"SELECT 1 FROM {sql_qualified(shape.database, shape.table)}"  # noqa: S608
                                   f"{where}", key))
        # CLIENT.FOUND_ROWS: the count is of rows matched, changed or not.
        return self._execute(
            f"UPDATE {sql_qualified(shape.database, shape.table)} SET"  # noqa: S608
            f" {', '.join(f'{sql_name(column)} = %s' for column, _ in changes)}{where}",
            [*(param for _, param in changes), *key], for_event=True)

    def _upsert_text(self, write: OneWayWrite) -> str:
        shape = write.shape.table
        cache_key = ("upsert", shape.database, shape.table, write.columns)
        text = self._statements.get(cache_key)
        if text is None:
            updates = [f"{sql_name(column)} = VALUES({sql_name(column)})"
                       for column in write.columns if column not in shape.key_columns]
            if not updates:
                first = sql_name(shape.primary_key[0])
                updates = [f"{first} = {first}"]
            text = self._statements[cache_key] = (
                f"INSERT INTO {sql_qualified(shape.database, shape.table)}"  # noqa: S608
                f" ({', '.join(sql_name(column) for column in write.columns)})"
                f" VALUES ({', '.join(['%s'] * len(write.columns))})"
                f" ON DUPLICATE KEY UPDATE {', '.join(updates)}")
        return text

    def _delete(self, write: OneWayWrite) -> None:
        shape = write.shape.table
        self._execute(f"DELETE FROM {sql_qualified(shape.database, shape.table)}"  # noqa: S608
                      f" WHERE {_key_match(shape.primary_key)}",
                      [mysql_param(value) for value in write.key], for_event=True)

    def _save_position(self, write: OneWayWrite, now: dt.datetime) -> None:
        self._execute(
            f"INSERT INTO {sql_qualified(write.database, KEY_POSITION_TABLE)} (table_name,"  # noqa: S608
            f" key_digest, {', '.join(POSITION_COLUMNS)}, event_id, updated_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE"
            f" {', '.join(f'{name} = VALUES({name})' for name in POSITION_COLUMNS)},"
            " event_id = VALUES(event_id), updated_at = VALUES(updated_at)",
            position_row(write, mysql_param(now)))

    def _insert_ledger(self, database: str, writes: Sequence[OneWayWrite],
                       now: dt.datetime) -> None:
        if not writes:
            return
        params: list[object] = []
        for write in writes:
            params += [str(write.event.event_id), write.event.origin_node_id, write.table,
                       mysql_param(now)]
        self._execute(
            f"INSERT INTO {sql_qualified(database, LEDGER_TABLE)} (event_id, origin_node_id,"  # noqa: S608
            f" table_name, applied_at) VALUES {', '.join(['(%s, %s, %s, %s)'] * len(writes))}",
            params)


def _key_match(primary_key: Sequence[str]) -> str:
    return " AND ".join(f"{sql_name(column)} = %s" for column in primary_key)


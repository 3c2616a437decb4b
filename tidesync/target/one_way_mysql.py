"""One-way tables (UPLINK on the shore, DOWNLINK on a ship) on MySQL/MariaDB: preparing them
and applying to them by key.

`enable_one_way_mysql` creates only what the applier needs beside the table: the
`_sync_applied` ledger and the `_sync_key_position` table, in the table's database. The
business table itself is left alone (no metadata columns, no triggers).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pymysql
from pymysql.constants import CLIENT

from tidesync.domain.clock import Clock, utc_now
from tidesync.target.cas import DuplicatePrimaryKey, reject_template
from tidesync.target.contract import (
    LEDGER_TABLE,
    RejectReason,
    Route,
    TargetError,
    TargetOutcome,
    TransientTargetError,
    same_names,
)
from tidesync.target.mysql_errors import map_mysql_error
from tidesync.target.mysql_schema import inspect_mysql_table, mysql_quote
from tidesync.target.mysql_statements import sql_name
from tidesync.target.mysql_values import mysql_param
from tidesync.target.one_way import (
    KEY_POSITION_TABLE,
    OneWayApplier,
    OneWayShape,
    OneWayWrite,
    SourcePosition,
)
from tidesync.target.table_state import EnableReport, SchemaError, check_node_id

log = logging.getLogger(__name__)
T = TypeVar("T")

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
_POSITION_COLUMNS = ("origin_node_id", "source_topic", "source_partition", "replay_epoch",
                     "source_position")


def _qualified(database: str, table: str) -> str:
    return f"{sql_name(database)}.{sql_name(table)}"


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


class MySQLOneWayApplier(OneWayApplier):
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
        self._options: dict[str, Any] = {
            "host": host, "port": port, "user": user, "password": password,
            "database": database, "charset": "utf8mb4", "autocommit": False,
            "client_flag": CLIENT.FOUND_ROWS, "connect_timeout": connect_timeout,
            "read_timeout": read_timeout, "write_timeout": write_timeout,
        }
        self._lock_wait_timeout = lock_wait_timeout
        self._connection: Any = None
        self._statements: dict[tuple[object, ...], str] = {}

    # -- the driver boundary ------------------------------------------------------------------

    def _call(self, action: Callable[[], T], *, commit: bool = False,
              statement: bool = False) -> T:
        try:
            return action()
        except pymysql.MySQLError as error:
            mapped = map_mysql_error(error, during_commit=commit, in_statement=statement)
            if isinstance(mapped, TargetError):
                log.warning("target MySQL call failed: %s", mapped.reason_code)
                self._drop_connection()
            raise mapped from error

    def _cursor(self) -> Any:
        if self._connection is None:
            self._connection = self._call(self._connect)
        return self._connection.cursor()

    def _connect(self) -> Any:
        connection = pymysql.connect(**self._options)
        with connection.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00', sql_mode = CONCAT_WS(',',"
                           " NULLIF(@@sql_mode, ''), 'STRICT_ALL_TABLES')")
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cursor.execute("SET innodb_lock_wait_timeout = %s, lock_wait_timeout = %s",
                           (self._lock_wait_timeout, self._lock_wait_timeout))
        connection.commit()
        return connection

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.open:
            connection.close()

    def _execute(self, statement: str, params: Sequence[object], *,
                 for_event: bool = False) -> int:
        cursor = self._cursor()
        return self._call(lambda: int(cursor.execute(statement, params)), statement=for_event)

    def _query(self, statement: str, params: Sequence[object]) -> list[tuple[Any, ...]]:
        cursor = self._cursor()
        return self._call(lambda: (cursor.execute(statement, params), list(cursor.fetchall()))[1])

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
            return reject_template(RejectReason.TABLE_NOT_ENABLED,
                                   f"table {table} is not prepared for one-way sync"
                                   " (tidesync target enable --direction UPLINK,"
                                   " or DOWNLINK on a ship)")
        return OneWayShape(state.shape(), other_unique_keys=unique)

    def _begin(self) -> None:
        """pymysql with autocommit off opens the transaction with the first statement."""

    def _commit(self) -> None:
        connection = self._connection
        if connection is not None:
            self._call(connection.commit, commit=True)

    def _rollback(self) -> None:
        connection = self._connection
        if connection is None:
            return
        try:
            self._call(connection.rollback)
        except TargetError:
            log.debug("rollback failed; the connection was dropped, which rolls back too")

    def _ledger_holds(self, database: str, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        found: set[uuid.UUID] = set()
        ledger = _qualified(database, LEDGER_TABLE)
        for start in range(0, len(event_ids), _LOOKUP_BATCH):
            batch = [str(event_id) for event_id in event_ids[start:start + _LOOKUP_BATCH]]
            rows = self._query(f"SELECT event_id FROM {ledger} WHERE event_id IN"  # noqa: S608
                               f" ({', '.join(['%s'] * len(batch))})", batch)
            found.update(uuid.UUID(str(event_id)) for (event_id,) in rows)
        return found

    def _positions(self, database: str, table: str,
                   digests: Sequence[str]) -> dict[str, SourcePosition]:
        found: dict[str, SourcePosition] = {}
        positions = _qualified(database, KEY_POSITION_TABLE)
        for start in range(0, len(digests), _LOOKUP_BATCH):
            batch = list(digests[start:start + _LOOKUP_BATCH])
            rows = self._query(
                f"SELECT key_digest, {', '.join(_POSITION_COLUMNS)} FROM {positions}"  # noqa: S608
                f" WHERE table_name = %s AND key_digest IN ({', '.join(['%s'] * len(batch))})",
                [table, *batch])
            for digest, origin, topic, partition, epoch, position in rows:
                found[str(digest)] = SourcePosition(str(origin), str(topic), int(partition),
                                                    int(epoch), int(position))
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
            self._execute(f"INSERT INTO {_qualified(shape.database, shape.table)}"  # noqa: S608
                          f" ({', '.join(sql_name(column) for column in write.columns)})"
                          f" VALUES ({', '.join(['%s'] * len(write.columns))})", params,
                          for_event=True)
        except DuplicatePrimaryKey:
            # The row appeared between the UPDATE and the INSERT: another writer; try again.
            raise TransientTargetError("DUPLICATE_KEY_RACE", "a row appeared meanwhile") from None

    def _update(self, write: OneWayWrite) -> int:
        shape = write.shape.table
        key = [mysql_param(value) for value in write.key]
        changes = [(column, mysql_param(value))
                   for column, value in zip(write.columns, write.values, strict=True)
                   if column not in shape.key_columns]
        where = f" WHERE {_key_match(shape.primary_key)}"
        if not changes:
            return len(self._query(f"SELECT 1 FROM {_qualified(shape.database, shape.table)}"  # noqa: S608
                                   f"{where}", key))
        # CLIENT.FOUND_ROWS: the count is of rows matched, changed or not.
        return self._execute(
            f"UPDATE {_qualified(shape.database, shape.table)} SET"  # noqa: S608
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
                f"INSERT INTO {_qualified(shape.database, shape.table)}"  # noqa: S608
                f" ({', '.join(sql_name(column) for column in write.columns)})"
                f" VALUES ({', '.join(['%s'] * len(write.columns))})"
                f" ON DUPLICATE KEY UPDATE {', '.join(updates)}")
        return text

    def _delete(self, write: OneWayWrite) -> None:
        shape = write.shape.table
        self._execute(f"DELETE FROM {_qualified(shape.database, shape.table)}"  # noqa: S608
                      f" WHERE {_key_match(shape.primary_key)}",
                      [mysql_param(value) for value in write.key], for_event=True)

    def _save_position(self, write: OneWayWrite, now: dt.datetime) -> None:
        source = write.source
        self._execute(
            f"INSERT INTO {_qualified(write.database, KEY_POSITION_TABLE)} (table_name,"  # noqa: S608
            f" key_digest, {', '.join(_POSITION_COLUMNS)}, event_id, updated_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE"
            f" {', '.join(f'{name} = VALUES({name})' for name in _POSITION_COLUMNS)},"
            " event_id = VALUES(event_id), updated_at = VALUES(updated_at)",
            [write.table, write.digest, source.origin_node_id, source.topic, source.partition,
             source.replay_epoch, source.position, str(write.event.event_id),
             mysql_param(now)])

    def _insert_ledger(self, database: str, writes: Sequence[OneWayWrite],
                       now: dt.datetime) -> None:
        if not writes:
            return
        params: list[object] = []
        for write in writes:
            params += [str(write.event.event_id), write.event.origin_node_id, write.table,
                       mysql_param(now)]
        self._execute(
            f"INSERT INTO {_qualified(database, LEDGER_TABLE)} (event_id, origin_node_id,"  # noqa: S608
            f" table_name, applied_at) VALUES {', '.join(['(%s, %s, %s, %s)'] * len(writes))}",
            params)

    # -- the rest of TargetApplier ------------------------------------------------------------

    def applied_event_ids(self, event_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Looks in the ledger of every database on the server that has one."""
        if not event_ids:
            return set()
        databases = [str(name) for (name,) in self._query(
            "SELECT TABLE_SCHEMA FROM information_schema.TABLES WHERE TABLE_NAME = %s",
            (LEDGER_TABLE,))]
        found: set[uuid.UUID] = set()
        for database in databases:
            found |= self._ledger_holds(database, event_ids)
        self._rollback()
        return found

    def close(self) -> None:
        self._drop_connection()


def _key_match(primary_key: Sequence[str]) -> str:
    return " AND ".join(f"{sql_name(column)} = %s" for column in primary_key)


"""The driver boundary both MySQL/MariaDB appliers share: one pymysql connection, its session
settings, the mapping of every driver error, and lookups in the `_sync_applied` ledger.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import pymysql
from pymysql.constants import CLIENT

from tidesync.target.cas import StatementRejected
from tidesync.target.contract import LEDGER_TABLE, TargetError
from tidesync.target.mysql_errors import map_mysql_error
from tidesync.target.mysql_statements import sql_name

log = logging.getLogger(__name__)
T = TypeVar("T")

_LOOKUP_BATCH = 1000


def sql_qualified(database: str, table: str) -> str:
    """`database`.`table`, quoted for a statement pymysql formats with %."""
    return f"{sql_name(database)}.{sql_name(table)}"


class MySQLSession:
    """One connection (autocommit off, CLIENT.FOUND_ROWS so an UPDATE counts matched rows),
    opened on first use and again after it was lost: UTC session time zone, strict SQL mode,
    READ COMMITTED, bounded lock waits. Mixed into the appliers of this package ahead of their
    applier base class; every pymysql error is mapped in `_call` and nowhere else."""

    _SESSION_VARIABLES: ClassVar[str] = ""
    """More `name = value, ` assignments for the session's first SET statement."""

    _options: dict[str, Any]
    _lock_wait_timeout: int
    _connection: Any
    _statements: dict[tuple[object, ...], str]

    def _open_session(
        self, *, host: str, port: int, user: str, password: str, database: str | None,
        client_flag: int, lock_wait_timeout: int, connect_timeout: float,
        read_timeout: float, write_timeout: float,
    ) -> None:
        # No call may wait forever on a half-open link: a COMMIT whose answer does not come
        # within read_timeout is CommitOutcomeUnknown, settled later from the ledger.
        self._options = {
            "host": host, "port": port, "user": user, "password": password,
            "database": database, "charset": "utf8mb4", "autocommit": False,
            "client_flag": CLIENT.FOUND_ROWS | client_flag,
            "connect_timeout": connect_timeout, "read_timeout": read_timeout,
            "write_timeout": write_timeout,
        }
        self._lock_wait_timeout = lock_wait_timeout
        self._connection = None
        self._statements = {}

    def _call(self, action: Callable[[], T], *, commit: bool = False,
              statement: bool = False) -> T:
        """Run a driver call, mapping its error.

        `statement`: the call runs events' statements (see map_mysql_error).
        """
        try:
            return action()
        except pymysql.MySQLError as error:
            mapped = map_mysql_error(error, during_commit=commit, in_statement=statement)
            if self._connection_lost(mapped):
                log.warning("target MySQL call failed: %s", _failure_code(mapped))
                self._drop_connection()
            raise mapped from error

    def _connection_lost(self, mapped: Exception) -> bool:
        """Whether the connection is of no further use after this error."""
        return isinstance(mapped, TargetError)

    def _cursor(self) -> Any:
        if self._connection is None:
            self._connection = self._call(self._connect)
        return self._connection.cursor()

    def _connect(self) -> Any:
        connection = pymysql.connect(**self._options)
        with connection.cursor() as cursor:
            self._prepare_session(cursor)
        connection.commit()
        return connection

    def _prepare_session(self, cursor: Any) -> None:
        cursor.execute(
            f"SET time_zone = '+00:00', {self._SESSION_VARIABLES}"
            "sql_mode = CONCAT_WS(',', NULLIF(@@sql_mode, ''), 'STRICT_ALL_TABLES')")
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        # Row locks (InnoDB) and metadata locks (DDL running on the table) alike.
        cursor.execute("SET innodb_lock_wait_timeout = %s, lock_wait_timeout = %s",
                       (self._lock_wait_timeout, self._lock_wait_timeout))

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        # close() sends COM_QUIT and ignores socket errors; it raises only when already closed.
        if connection is not None and connection.open:
            connection.close()

    def _execute(self, statement: str, params: Sequence[object] | None = None, *,
                 for_event: bool = False) -> int:
        cursor = self._cursor()
        return self._call(lambda: int(cursor.execute(statement, params)), statement=for_event)

    def _query(self, statement: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        cursor = self._cursor()
        return self._call(lambda: (cursor.execute(statement, params), list(cursor.fetchall()))[1])

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
        ledger = sql_qualified(database, LEDGER_TABLE)
        for start in range(0, len(event_ids), _LOOKUP_BATCH):
            batch = [str(event_id) for event_id in event_ids[start:start + _LOOKUP_BATCH]]
            rows = self._query(f"SELECT event_id FROM {ledger} WHERE event_id IN"  # noqa: S608
                               f" ({', '.join(['%s'] * len(batch))})", batch)
            found.update(uuid.UUID(str(event_id)) for (event_id,) in rows)
        return found

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


def _failure_code(mapped: Exception) -> str:
    if isinstance(mapped, TargetError):
        return mapped.reason_code
    if isinstance(mapped, StatementRejected):
        return mapped.reason.value
    return type(mapped).__name__

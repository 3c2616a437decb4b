"""The sync API's database connections: a PostgreSQL pool or the embedded SQLite file, and the
one place driver errors become StoreUnavailable (answered 503 + Retry-After; nothing is kept in
memory as if stored).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from tidesync.migrations import MigrationError, migrate_postgres, migrate_sqlite
from tidesync.sqlite_store import SQLiteConnections

log = logging.getLogger(__name__)

Connection = psycopg.Connection[TupleRow]

# Primary SQLite result codes that mean "busy or failing now, may work later" (sqlite3.h):
# BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN, PROTOCOL.
_SQLITE_UNAVAILABLE = frozenset({5, 6, 7, 8, 10, 13, 14, 15})


class StoreUnavailable(Exception):
    """The database could not be reached or failed the statement; the request may be retried."""


def open_pool(conninfo: str, size: int, timeout: float, name: str = "tidesync-ingress"
              ) -> ConnectionPool[Connection]:
    """A pool, not yet open: `pool.open(wait=False)` connects in the background, so a server
    starts while PostgreSQL is down (its requests then answer 503)."""
    return ConnectionPool(
        conninfo, min_size=1, max_size=size, timeout=timeout, open=False, name=name,
        kwargs={"autocommit": False}, reconnect_timeout=24 * 3600,
    )


@contextmanager
def transaction(pool: ConnectionPool[Connection]) -> Iterator[Connection]:
    """A connection inside one transaction: committed when the block ends, rolled back on error.

    Connection and server errors surface as StoreUnavailable; other psycopg errors (bugs,
    constraint violations) pass through unchanged.
    """
    try:
        with pool.connection() as conn, conn.transaction():
            yield conn
    except PoolTimeout as error:
        raise StoreUnavailable("no database connection available") from error
    except (psycopg.OperationalError, psycopg.InterfaceError) as error:
        raise StoreUnavailable(type(error).__name__) from error


class PostgresSyncDatabase:
    """The sync tables in PostgreSQL, behind one pool."""

    def __init__(self, pool: ConnectionPool[Connection]) -> None:
        self.pool = pool

    def transaction(self) -> AbstractContextManager[Connection]:
        """A connection inside one transaction (see `transaction`)."""
        return transaction(self.pool)

    def start(self) -> None:
        """Open the pool and bring the schema up to date (blocking). PostgreSQL being down is
        logged, not fatal: requests answer 503 until it is back."""
        self.pool.open(wait=False)
        try:
            migrate_postgres(str(self.pool.conninfo))
        except (psycopg.OperationalError, MigrationError) as error:
            log.warning("sync tables not migrated at startup: %s", type(error).__name__)

    def close(self) -> None:
        self.pool.close()


class SQLiteSyncDatabase:
    """The sync tables in the embedded SQLite event store file.

    Every request is one `BEGIN IMMEDIATE` transaction: SQLite has one writer at a time, and a
    writer waits up to `busy_timeout` seconds for its turn before the request answers 503.
    """

    def __init__(self, path: str, size: int = 4, busy_timeout: float = 5.0) -> None:
        self.path = path
        self.connections = SQLiteConnections(path, size, busy_timeout)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A connection inside one write transaction; busy, locked and I/O failures surface as
        StoreUnavailable, other sqlite3 errors pass through unchanged."""
        try:
            with self.connections.transaction() as conn:
                yield conn
        except TimeoutError as error:
            raise StoreUnavailable("no database connection available") from error
        except (sqlite3.OperationalError, sqlite3.InterfaceError) as error:
            code = getattr(error, "sqlite_errorcode", None)
            if isinstance(error, sqlite3.InterfaceError) or (
                    isinstance(code, int) and code & 0xFF in _SQLITE_UNAVAILABLE):
                raise StoreUnavailable(f"SQLite error {code}") from error
            raise

    def start(self) -> None:
        """Bring the schema up to date; a failure is logged, requests then answer errors."""
        try:
            migrate_sqlite(self.path)
        except MigrationError as error:
            log.warning("sync tables not migrated at startup: %s", error)

    def close(self) -> None:
        self.connections.close()

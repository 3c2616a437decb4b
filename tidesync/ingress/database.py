"""The sync API's database connections (a PostgreSQL pool), and the one place driver errors
become StoreUnavailable (answered 503 + Retry-After; nothing is kept in
memory as if stored).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from tidesync.domain.errors import ErrorCode, TidesyncError, Unavailable
from tidesync.migrations import MigrationError, migrate_postgres

log = logging.getLogger(__name__)

Connection = psycopg.Connection[TupleRow]
POOL_MAX_IDLE = 60.0
"""Seconds a connection beyond the pool's one may stay unused before the pool closes it."""


class StoreUnavailable(Unavailable):
    """The database could not be reached or failed the statement; the request may be retried."""


class UnstorableValue(TidesyncError):
    """A value of the request the database cannot hold (a client error: answered 400)."""

    code = ErrorCode.INVALID_INPUT


def open_pool(conninfo: str, size: int, timeout: float, name: str = "tidesync-ingress"
              ) -> ConnectionPool[Connection]:
    """A pool, not yet open: `pool.open(wait=False)` connects in the background, so a server
    starts while PostgreSQL is down (its requests then answer 503)."""
    return ConnectionPool(
        conninfo, min_size=1, max_size=size, timeout=timeout, open=False, name=name,
        kwargs={"autocommit": False}, reconnect_timeout=24 * 3600, max_idle=POOL_MAX_IDLE,
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
    except psycopg.DataError as error:
        raise UnstorableValue(type(error).__name__) from error


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



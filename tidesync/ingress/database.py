"""The sync API's PostgreSQL connections: one pool, and the one place driver errors become
StoreUnavailable (answered 503 + Retry-After; nothing is kept in memory as if stored).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

Connection = psycopg.Connection[TupleRow]


class StoreUnavailable(Exception):
    """PostgreSQL could not be reached or failed the statement; the request may be retried."""


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

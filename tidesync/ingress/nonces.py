"""The persisted request-id cache: a replayed request is refused even after a restart.

Rows live until their request could no longer pass the timestamp check; expired rows are purged.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from psycopg_pool import ConnectionPool

from tidesync.ingress.auth import NonceStore
from tidesync.ingress.database import Connection, transaction

_REMEMBER = (
    "INSERT INTO request_nonce (node_id, request_id, expires_at) VALUES (%s, %s, %s)"
    " ON CONFLICT (node_id, request_id) DO UPDATE SET expires_at = EXCLUDED.expires_at"
    " WHERE request_nonce.expires_at <= %s"
    " RETURNING 1"
)
_PURGE = "DELETE FROM request_nonce WHERE expires_at <= %s"


class PostgresNonceStore:
    """Request ids per node in `request_nonce`; purges expired ids every `purge_every` s."""

    def __init__(self, pool: ConnectionPool[Connection], purge_every: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self.purge_every = purge_every
        self._monotonic = monotonic
        self._last_purge = monotonic()

    def remember(self, node_id: str, request_id: str, expires_at: dt.datetime,
                 now: dt.datetime) -> bool:
        """Record the id; False if it is already recorded and not yet expired."""
        with transaction(self.pool) as conn:
            return self._remember(conn, node_id, request_id, expires_at, now)

    def _remember(self, conn: Connection, node_id: str, request_id: str,
                  expires_at: dt.datetime, now: dt.datetime) -> bool:
        # An expired row may be reused: its request would fail the timestamp check anyway.
        fresh = conn.execute(_REMEMBER, (node_id, request_id, expires_at, now)).fetchone()
        if self._monotonic() - self._last_purge >= self.purge_every:
            self._last_purge = self._monotonic()
            conn.execute(_PURGE, (now,))
        return fresh is not None

    def within(self, conn: Connection) -> NonceStore:
        """This store inside the caller's transaction: the id counts as used only if that
        transaction commits, so a request that failed may be retried with the same id."""
        return _NoncesWithin(self, conn)

    def purge(self, now: dt.datetime) -> int:
        """Delete expired ids now; returns how many."""
        with transaction(self.pool) as conn:
            return conn.execute(_PURGE, (now,)).rowcount


class _NoncesWithin:
    def __init__(self, store: PostgresNonceStore, conn: Connection) -> None:
        self.store, self.conn = store, conn

    def remember(self, node_id: str, request_id: str, expires_at: dt.datetime,
                 now: dt.datetime) -> bool:
        return self.store._remember(self.conn, node_id, request_id, expires_at, now)





"""One PostgreSQL pool for every event-sourced application of a process.

The library gives each application its own pool, holding at least one connection: a shore
process runs a dozen applications, so it held a dozen connections doing nothing. This factory
hands every application on the same server, database and settings one shared pool, named in
`pg_stat_activity` and shrinking back to its minimum when idle; the last application to close
closes it.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from types import TracebackType
from typing import Self

from eventsourcing.postgres import PostgresDatastore, PostgresFactory
from eventsourcing.utils import Environment

APPLICATION_NAME = "TIDESYNC_APPLICATION_NAME"
"""Environment key: the `application_name` the shared pool's connections carry."""
POOL_MAX_IDLE = "TIDESYNC_POOL_MAX_IDLE"
"""Environment key: seconds a connection beyond the pool's minimum may stay unused."""
_MAX_APPLICATION_NAME = 63  # PostgreSQL truncates longer names (NAMEDATALEN - 1)


class _SharedDatastores:
    """The process's shared datastores, by what their connections are, with their users."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[PostgresDatastore, int]] = {}

    def acquire(self, key: Hashable, offered: PostgresDatastore) -> PostgresDatastore:
        """The datastore for `key`: the one already shared, else `offered` from now on."""
        with self._lock:
            datastore, users = self._entries.get(key, (offered, 0))
            self._entries[key] = (datastore, users + 1)
            return datastore

    def release(self, key: Hashable) -> None:
        """One user is done; the last one closes the pool."""
        with self._lock:
            datastore, users = self._entries[key]
            if users > 1:
                self._entries[key] = (datastore, users - 1)
                return
            del self._entries[key]
        datastore.close()

    def users(self, key: Hashable) -> int:
        with self._lock:
            return self._entries.get(key, (None, 0))[1]


SHARED = _SharedDatastores()


class SharedPostgresFactory(PostgresFactory):
    """The library's PostgreSQL factory, over the process's shared datastore."""

    def __init__(self, env: Environment) -> None:
        super().__init__(env)
        offered = self.datastore
        _configure(offered, env)
        self._key = _datastore_key(offered)
        self._released = False
        self.datastore = SHARED.acquire(self._key, offered)

    def close(self) -> None:
        if not self._released:
            self._released = True
            SHARED.release(self._key)

    def __enter__(self) -> Self:
        return self  # the shared pool opens on first use, as the library's does

    def __exit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                 exc_tb: TracebackType | None) -> None:
        self.close()  # never the library's exit, which would close the pool others share


def _configure(datastore: PostgresDatastore, env: Environment) -> None:
    """Name the pool's connections and let it shrink when idle (before it ever opens)."""
    name = env.get(APPLICATION_NAME)
    if name:
        assert isinstance(datastore.pool.kwargs, dict)
        datastore.pool.kwargs["application_name"] = name[:_MAX_APPLICATION_NAME]
    max_idle = env.get(POOL_MAX_IDLE)
    if max_idle:
        datastore.pool.max_idle = float(max_idle)


def _datastore_key(datastore: PostgresDatastore) -> Hashable:
    """What makes two datastores interchangeable: where and how their connections go."""
    pool = datastore.pool
    kwargs = pool.kwargs if isinstance(pool.kwargs, dict) else {}
    connection = tuple(sorted((key, str(value)) for key, value in kwargs.items()
                              if key != "row_factory"))
    return (connection, pool.min_size, pool.max_size, pool.timeout, pool.max_idle,
            pool.max_waiting, pool.max_lifetime, datastore.schema, datastore.lock_timeout,
            datastore.idle_in_transaction_session_timeout, datastore.pre_ping,
            datastore.single_row_tracking, datastore.originator_id_type,
            datastore.enable_db_functions)

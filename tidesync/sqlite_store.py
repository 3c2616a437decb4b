"""The embedded SQLite event store file: how every connection to it is set up, a small pool
with `BEGIN IMMEDIATE` transactions for tidesync's own tables, and how values are stored.

The `eventsourcing` applications and tidesync's tables (inbox, views, leases) share one file, so
statements saved with an application's events commit atomically with them.
"""

from __future__ import annotations

import datetime as dt
import queue
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import ApplicationRecorder
from eventsourcing.sqlite import (
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteFactory,
)
from eventsourcing.utils import resolve_topic

DEFAULT_BUSY_TIMEOUT = 10.0


def tune(connection: sqlite3.Connection, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
    """WAL (readers never block the writer), a commit is on disk when it returns, foreign keys
    enforced, and a writer waits `busy_timeout` seconds for the lock instead of failing."""
    connection.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    connection.execute("PRAGMA foreign_keys = ON")


def connect(path: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> sqlite3.Connection:
    """A tuned connection in autocommit mode: transactions are opened explicitly."""
    connection = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None,
                                 check_same_thread=False)
    try:
        tune(connection, busy_timeout)
    except sqlite3.Error:
        connection.close()
        raise
    return connection


class SQLiteConnections:
    """Up to `size` connections to one SQLite file, shared by threads one at a time.

    SQLite has one writer at a time: `transaction()` takes the write lock up front
    (`BEGIN IMMEDIATE`), so a transaction that reads before it writes never fails to upgrade.
    """

    def __init__(self, path: str, size: int = 4,
                 busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._idle: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection in autocommit mode (each statement its own transaction); raises
        TimeoutError when none is free within the busy timeout."""
        if not self._slots.acquire(timeout=self.busy_timeout):
            raise TimeoutError("no SQLite connection free")
        try:
            conn = self._take()
            try:
                yield conn
            finally:
                self._give_back(conn)
        finally:
            self._slots.release()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A connection inside one write transaction: committed when the block ends, rolled
        back on error."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    def _take(self) -> sqlite3.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return connect(self.path, self.busy_timeout)

    def _give_back(self, conn: sqlite3.Connection) -> None:
        # A connection left inside a transaction (a failed COMMIT or ROLLBACK) is not reused.
        if self._closed or conn.in_transaction:
            conn.close()
        else:
            self._idle.put(conn)

    def __enter__(self) -> SQLiteConnections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ----------------------------------------------------------------------------- values


def moment_text(moment: dt.datetime) -> str:
    """A UTC time as stored: fixed-width text, so text order is time order."""
    if moment.tzinfo is None:
        raise ValueError("times are stored from aware datetimes only")
    # isoformat pads the year to four digits where strftime may not.
    utc = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return utc.isoformat(sep="T", timespec="microseconds") + "Z"


def optional_moment_text(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment_text(moment)


def moment_from_text(text: str) -> dt.datetime:
    """A stored time back as an aware UTC datetime (also reads other ISO 8601 forms)."""
    moment = dt.datetime.fromisoformat(text)
    return moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)


def uuid_text(value: uuid.UUID | str) -> str:
    """A UUID as stored: canonical lower-case text."""
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(value))


def sqlite_value(value: object) -> object:
    """A parameter as sqlite3 binds it: UUIDs and times as their stored text."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime):
        return moment_text(value)
    return value


# ----------------------------------------------------------------------------- event store


class _TunedConnectionPool(SQLiteConnectionPool):
    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        tune(connection._sqlite_conn, float(self.lock_timeout or DEFAULT_BUSY_TIMEOUT))
        return connection


class SQLiteApplicationsFactory(SQLiteFactory):
    """The `eventsourcing.sqlite` factory, with each application's events in its own table
    (`<name>_events`, as on PostgreSQL) and every connection tuned like tidesync's own.

    The library's factory puts every application of one file into a single `stored_events`
    table, so each application's notification log would carry the others' events too.
    """

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        store = self.datastore
        store.pool = _TunedConnectionPool(db_name=store.pool.db_name,
                                          lock_timeout=store.pool.lock_timeout)

    def application_recorder(self) -> ApplicationRecorder:
        topic = self.env.get(self.APPLICATION_RECORDER_TOPIC)
        recorder_class: type[SQLiteApplicationRecorder] = (
            resolve_topic(topic) if topic else self.application_recorder_class)
        assert issubclass(recorder_class, SQLiteApplicationRecorder)
        table = f"{self.env.name.lower() or 'stored'}_events"
        recorder = recorder_class(datastore=self.datastore, events_table_name=table)
        if self.env_create_table():
            recorder.create_table()
        return recorder


SQLITE_FACTORY_TOPIC = (
    f"{SQLiteApplicationsFactory.__module__}:{SQLiteApplicationsFactory.__qualname__}")

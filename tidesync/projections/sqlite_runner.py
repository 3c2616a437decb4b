"""The projection engine on the SQLite store: the twin of PostgresProjectionRunner, and
the SQLite writers of the receipts view (what ships pull) and the record_head view (the
console's other views need PostgreSQL; `sqlite_views` lists what SQLite keeps).

One `BEGIN IMMEDIATE` transaction per batch writes the view rows and the tracking position, so
a batch is projected exactly once; SQLite's single writer stands in for the advisory lock.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from eventsourcing.application import Application
from eventsourcing.persistence import ApplicationRecorder

from tidesync.domain.clock import utc_now
from tidesync.projections.engine import (
    ConcurrentProjectionError,
    Events,
    ProjectionStatus,
    Tracking,
)
from tidesync.projections.receipts import ReceiptsProjection, receipt_columns
from tidesync.projections.record_head import RecordHeadProjection
from tidesync.sqlite_store import SQLiteConnections, moment_from_text, moment_text, uuid_text

log = logging.getLogger(__name__)


class SQLiteProjection(Protocol):
    """A read model fed by one application's events, written with sqlite3."""

    name: str
    topics: tuple[str, ...]
    """Stored event topics to read (`module:Class.Event`); empty means every event."""

    def process(self, cursor: sqlite3.Cursor, events: Events) -> None:
        """Write the view rows for these (notification id, event) pairs."""


class SQLiteProjectionRunner:
    """Runs one projection over one application into view tables of the SQLite store file."""

    def __init__(self, projection: SQLiteProjection, app: Application[Any],
                 connections: SQLiteConnections, batch_size: int = 1000,
                 tracking_name: str | None = None) -> None:
        self.projection = projection
        self.app = app
        self.connections = connections
        self.batch_size = batch_size
        self.tracking_name = tracking_name or projection.name
        self._rate = 0.0

    @property
    def recorder(self) -> ApplicationRecorder:
        recorder = self.app.recorder
        assert isinstance(recorder, ApplicationRecorder)
        return recorder

    def position(self) -> int:
        return self.tracking().position

    def tracking(self) -> Tracking:
        with self.connections.connection() as conn:
            return _read_tracking(conn.cursor(), self.tracking_name)

    def run_once(self) -> int:
        """Process the next batch; returns how many notifications it consumed.

        Raises ConcurrentProjectionError when another runner moved the projection meanwhile.
        """
        started = time.perf_counter()
        position = self.position()
        batch = self._next_batch(position)
        if batch is None:
            return 0
        events, new_position = batch
        with self.connections.transaction() as conn:
            cursor = conn.cursor()
            if _read_tracking(cursor, self.tracking_name).position != position:
                raise ConcurrentProjectionError(self.tracking_name)
            if events:
                self.projection.process(cursor, events)
            self._track(cursor, new_position, position, len(events), started)
        return len(events)

    def catch_up_in(self, cursor: sqlite3.Cursor,
                    on_batch: Callable[[int], None] | None = None) -> int:
        """Process everything there is inside the caller's write transaction (which holds
        SQLite's one write lock, so no other runner moves the position meanwhile); returns how
        many notifications it consumed. `on_batch` gets the running total after each batch."""
        total = 0
        while True:
            started = time.perf_counter()
            position = _read_tracking(cursor, self.tracking_name).position
            batch = self._next_batch(position)
            if batch is None:
                return total
            events, new_position = batch
            if events:
                self.projection.process(cursor, events)
            self._track(cursor, new_position, position, len(events), started)
            total += len(events)
            if on_batch is not None:
                on_batch(total)

    def _next_batch(self, position: int) -> tuple[Events, int] | None:
        """The events after `position` and the position to record after them, or None.

        The head is read first: SQLite commits one writer at a time, so every id up to it is
        committed and a batch that is not full may pass ids the projection's topics skip.
        """
        head = self.recorder.max_notification_id() or 0
        notifications = self.recorder.select_notifications(
            start=position, limit=self.batch_size, topics=list(self.projection.topics),
            inclusive_of_start=False,
        )
        if len(notifications) == self.batch_size:
            new_position = notifications[-1].id
        else:
            new_position = max([head, position, *(n.id for n in notifications[-1:])])
        if new_position <= position:
            return None
        mapper = self.app.mapper
        return [(n.id, mapper.to_domain_event(n)) for n in notifications], new_position

    def _track(self, cursor: sqlite3.Cursor, new_position: int, old_position: int, count: int,
               started: float) -> None:
        elapsed = time.perf_counter() - started
        self._rate = count / elapsed if count and elapsed > 0 else self._rate
        now = moment_text(utc_now())
        # The WHERE guard makes a runner that read a stale position fail instead of writing
        # the same view rows twice.
        cursor.execute(
            "INSERT INTO projection_tracking (name, position, updated_at, processed, rate,"
            " last_batch_at) VALUES (?1, ?2, ?3, ?4, ?5, CASE WHEN ?4 > 0 THEN ?3 END)"
            " ON CONFLICT (name) DO UPDATE"
            " SET position = excluded.position, updated_at = excluded.updated_at,"
            " processed = projection_tracking.processed + excluded.processed,"
            " rate = CASE WHEN excluded.processed > 0 THEN excluded.rate"
            " ELSE projection_tracking.rate END,"
            " last_batch_at = COALESCE(excluded.last_batch_at, projection_tracking.last_batch_at)"
            " WHERE projection_tracking.position = ?6",
            (self.tracking_name, new_position, now, count, self._rate, old_position),
        )
        if cursor.rowcount != 1:
            raise ConcurrentProjectionError(self.tracking_name)

    def run_until_idle(self, on_progress: Callable[[int], None] | None = None) -> int:
        total = 0
        while (count := self.run_once()) > 0:
            total += count
            if on_progress is not None:
                on_progress(total)
        return total

    def status(self) -> ProjectionStatus:
        tracking = self.tracking()
        head = self.recorder.max_notification_id() or 0
        return ProjectionStatus(self.tracking_name, tracking.position, head, tracking.rate,
                                self.pending(tracking.position), tracking.processed,
                                tracking.updated_at, self.app.name)

    def pending(self, position: int) -> int | None:
        """How many notifications after `position` carry one of the projection's topics (all
        when it has none); None when the events are not in this file."""
        table = getattr(self.recorder, "events_table_name", None)
        if not isinstance(table, str) or not table.isidentifier():
            return None
        topics = list(self.projection.topics)
        where = f" AND topic IN ({', '.join('?' * len(topics))})" if topics else ""
        try:
            with self.connections.connection() as conn:
                row = conn.execute(
                    f"SELECT count(*) FROM {table} WHERE rowid > ?{where}",  # noqa: S608
                    (position, *topics)).fetchone()
        except sqlite3.OperationalError:
            return None
        return int(row[0]) if row else 0


def _read_tracking(cursor: sqlite3.Cursor, name: str) -> Tracking:
    row = cursor.execute("SELECT position, processed, rate, updated_at FROM projection_tracking"
                         " WHERE name = ?", (name,)).fetchone()
    if row is None:
        return Tracking(0, 0, 0.0, None)
    return Tracking(int(row[0]), int(row[1]), float(row[2]), moment_from_text(row[3]))


class SQLiteReceiptsProjection:
    """The receipts view written with sqlite3: the same rows and `seq` numbering as
    ReceiptsProjection, with ids and times stored as text."""

    name = ReceiptsProjection.name
    topics = ReceiptsProjection.topics

    def __init__(self, table: str = "receipt") -> None:
        self.table = table

    def process(self, cursor: sqlite3.Cursor, events: Events) -> None:
        columns = receipt_columns(events)
        if not columns[0]:
            return
        first = cursor.execute(f"SELECT COALESCE(max(seq), 0) FROM {self.table}").fetchone()  # noqa: S608
        start = int(first[0]) if first else 0
        cursor.executemany(
            f"INSERT INTO {self.table} (seq, origin_node_id, event_id, result, reason_code,"  # noqa: S608
            " conflict_id, result_revision, decided_at, source_topic, source_partition,"
            " source_position) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(start + number, origin, uuid_text(event_id), result, reason,
              uuid_text(conflict) if conflict else None,
              uuid.UUID(revision).bytes if revision else None, moment_text(at), topic,
              partition, position)
             for number, (origin, event_id, result, reason, conflict, revision, at, topic,
                          partition, position) in enumerate(zip(*columns, strict=True), 1)],
        )


class SQLiteRecordHeadProjection:
    """The record_head view written with sqlite3: the same rows as RecordHeadProjection, with
    ids and times stored as text and the tombstone as 0/1."""

    name = RecordHeadProjection.name
    topics = RecordHeadProjection.topics

    def __init__(self, table: str = "record_head") -> None:
        self.table = table
        self._heads = RecordHeadProjection(table)

    def process(self, cursor: sqlite3.Cursor, events: Events) -> None:
        rows = self._heads.head_rows(events)
        if not rows:
            return
        cursor.executemany(
            f"INSERT INTO {self.table} AS h (rule_id, key_digest, record_key, database,"  # noqa: S608
            " table_name, revision, origin_node_id, last_event_id, tombstone, updated_at,"
            " log_position) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (rule_id, key_digest) DO UPDATE SET"
            " record_key = excluded.record_key, database = excluded.database,"
            " table_name = excluded.table_name, revision = excluded.revision,"
            " origin_node_id = excluded.origin_node_id,"
            " last_event_id = excluded.last_event_id, tombstone = excluded.tombstone,"
            " updated_at = excluded.updated_at, log_position = excluded.log_position"
            " WHERE h.log_position <= excluded.log_position",
            [(rule_id, digest, record_key, *self._heads.location(record_key),
              None if revision is None else uuid_text(str(revision)), origin,
              uuid_text(str(event_id)), int(tombstone), moment_text(finalized_at), position)
             for (rule_id, digest, record_key, revision, origin, event_id, tombstone,
                  finalized_at, position) in rows],
        )

"""The projection engine: follows an application's notification log in batches and writes a
view and its tracking position in one transaction per batch (exactly once, not per event).

Notification ids can have gaps after failed saves, so positions are compared with `>`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from eventsourcing.application import Application
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import ApplicationRecorder
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)

Cursor = psycopg.Cursor[TupleRow]


class Projection(Protocol):
    """A read model fed by one application's events."""

    name: str
    topics: tuple[str, ...]
    """Stored event topics to read (`module:Class.Event`); empty means every event."""

    def process(self, cursor: Cursor, events: Sequence[tuple[int, DomainEventProtocol[Any]]],
                ) -> None:
        """Write the view rows for these (notification id, event) pairs."""


def event_topic(cls: type) -> str:
    """The stored topic of an event class, as the library records it."""
    return f"{cls.__module__}:{cls.__qualname__}"


@dataclass
class ProjectionStatus:
    name: str
    position: int
    head: int
    rate_per_second: float

    @property
    def behind(self) -> int:
        return max(self.head - self.position, 0)


class PostgresProjectionRunner:
    """Runs one projection over one application into PostgreSQL view tables."""

    def __init__(self, projection: Projection, app: Application[Any],
                 pool: ConnectionPool[psycopg.Connection[TupleRow]], batch_size: int = 1000,
                 tracking_name: str | None = None) -> None:
        self.projection = projection
        self.app = app
        self.pool = pool
        self.batch_size = batch_size
        self.tracking_name = tracking_name or projection.name
        self._rate = 0.0

    @property
    def recorder(self) -> ApplicationRecorder:
        recorder = self.app.recorder
        assert isinstance(recorder, ApplicationRecorder)
        return recorder

    def position(self) -> int:
        with self.pool.connection() as conn:
            row = conn.execute("SELECT position FROM projection_tracking WHERE name = %s",
                               (self.tracking_name,)).fetchone()
        return 0 if row is None else int(row[0])

    def run_once(self) -> int:
        """Process the next batch; returns how many notifications it consumed."""
        started = time.perf_counter()
        position = self.position()
        notifications = self.recorder.select_notifications(
            start=position, limit=self.batch_size, topics=list(self.projection.topics),
            inclusive_of_start=False,
        )
        if not notifications:
            return 0
        events = [(n.id, self.app.mapper.to_domain_event(n)) for n in notifications]
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            self.projection.process(cursor, events)
            self._track(cursor, notifications[-1].id, position)
        elapsed = time.perf_counter() - started
        self._rate = len(events) / elapsed if elapsed > 0 else 0.0
        return len(events)

    def _track(self, cursor: Cursor, new_position: int, old_position: int) -> None:
        # The WHERE guard makes a concurrent runner of the same projection fail instead of
        # writing the same view rows twice.
        cursor.execute(
            "INSERT INTO projection_tracking (name, position, updated_at)"
            " VALUES (%s, %s, now()) ON CONFLICT (name) DO UPDATE"
            " SET position = EXCLUDED.position, updated_at = now()"
            " WHERE projection_tracking.position = %s",
            (self.tracking_name, new_position, old_position),
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
        return ProjectionStatus(self.tracking_name, self.position(),
                                self.recorder.max_notification_id() or 0, self._rate)


class ConcurrentProjectionError(RuntimeError):
    """Another runner advanced the same projection meanwhile; this batch was rolled back."""

    def __init__(self, name: str) -> None:
        super().__init__(f"projection {name} was advanced by another runner")

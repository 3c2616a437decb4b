"""The projection engine: follows an application's notification log in batches and writes a
view and its tracking position in one transaction per batch (exactly once, not per event).

Notification ids can have gaps after failed saves, so positions are compared with `>`.
Writers of one view serialise on a transaction-level advisory lock named after the view.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
from eventsourcing.application import Application
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import ApplicationRecorder
from psycopg import sql
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.domain.errors import ErrorCode, TidesyncError
from tidesync.projections.failures import TRANSIENT_ERRORS, mark_failed, read_failure

log = logging.getLogger(__name__)

Cursor = psycopg.Cursor[TupleRow]
Pool = ConnectionPool[psycopg.Connection[TupleRow]]
Events = Sequence[tuple[int, DomainEventProtocol[Any]]]

VIEW_LOCK_CLASS = 0x7476  # first key of the view writers' advisory locks ("tv")


class Projection(Protocol):
    """A read model fed by one application's events."""

    name: str
    topics: tuple[str, ...]
    """Stored event topics to read (`module:Class.Event`); empty means every event."""

    def process(self, cursor: Cursor, events: Events) -> None:
        """Write the view rows for these (notification id, event) pairs."""


class Refresher(Protocol):
    """Copies inputs that are not event streams (heartbeats, the inbox) into a view."""

    def refresh(self, cursor: Cursor) -> None: ...


def event_topic(cls: type) -> str:
    """The stored topic of an event class, as the library records it."""
    return f"{cls.__module__}:{cls.__qualname__}"


def lock_view(cursor: Cursor, lock_key: str, *, wait: bool) -> bool:
    """Take the view's writer lock for this transaction; without `wait`, False if it is held."""
    function = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
    cursor.execute(f"SELECT {function}(%s, hashtext(%s))",
                   (VIEW_LOCK_CLASS, lock_key))
    if wait:
        return True
    row = cursor.fetchone()
    return bool(row and row[0])


@dataclass(frozen=True)
class ProjectionStatus:
    """Where one projection stands in its application's notification log."""

    name: str
    position: int
    head: int
    rate_per_second: float
    pending: int | None = None
    """Notifications after `position` that the projection reads (None: not counted)."""
    processed: int = 0
    updated_at: dt.datetime | None = None
    application: str = ""

    @property
    def behind(self) -> int:
        if self.pending is not None:
            return self.pending
        return max(self.head - self.position, 0)

    @property
    def eta_seconds(self) -> float | None:
        """Seconds to catch up at the last batch's rate (None when it cannot be told)."""
        if self.behind == 0:
            return 0.0
        return self.behind / self.rate_per_second if self.rate_per_second > 0 else None


@dataclass(frozen=True)
class Tracking:
    position: int
    processed: int
    rate: float
    updated_at: dt.datetime | None


class PostgresProjectionRunner:
    """Runs one projection over one application into PostgreSQL view tables.

    `tracking_name` names its row in projection_tracking; `lock_key` the advisory lock its
    view's writers share (default: the tracking name).
    """

    def __init__(self, projection: Projection, app: Application[Any], pool: Pool,
                 batch_size: int = 1000, tracking_name: str | None = None,
                 lock_key: str | None = None) -> None:
        self.projection = projection
        self.app = app
        self.pool = pool
        self.batch_size = batch_size
        self.tracking_name = tracking_name or projection.name
        self.lock_key = lock_key or self.tracking_name
        self._rate = 0.0

    @property
    def recorder(self) -> ApplicationRecorder:
        recorder = self.app.recorder
        assert isinstance(recorder, ApplicationRecorder)
        return recorder

    def position(self) -> int:
        return self.tracking().position

    def tracking(self) -> Tracking:
        with self.pool.connection() as conn, conn.cursor() as cursor:
            return read_tracking(cursor, self.tracking_name)

    def run_once(self) -> int:
        """Process the next batch; returns how many notifications it consumed.

        Raises ConcurrentProjectionError when another runner holds the view's lock.
        """
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            if not lock_view(cursor, self.lock_key, wait=False):
                raise ConcurrentProjectionError(self.tracking_name)
            return self._step(cursor) or 0

    def catch_up_in(self, cursor: Cursor) -> int:
        """Process everything there is inside the caller's transaction (which holds the view's
        lock); returns how many notifications it consumed."""
        total = 0
        while (count := self._step(cursor)) is not None:
            total += count
        return total

    def _step(self, cursor: Cursor) -> int | None:
        """One batch in the caller's transaction: the notifications consumed, or None when
        there was nothing to do."""
        started = time.perf_counter()
        # Read under the view's lock: no other runner moves the position meanwhile.
        position = read_tracking(cursor, self.tracking_name).position
        batch = self._next_batch(position)
        if batch is None:
            return None
        events, new_position = batch
        if events:
            self.projection.process(cursor, events)
        self._track(cursor, new_position, position, len(events), started)
        return len(events)

    def _next_batch(self, position: int) -> tuple[Events, int] | None:
        """The events after `position` and the position to record after them, or None.

        The head is read before selecting: ids up to it are committed (event inserts are
        serialised by the library's table lock), so when the batch is not full the position
        may pass events the projection's topics skip.
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

    def _track(self, cursor: Cursor, new_position: int, old_position: int, count: int,
               started: float) -> None:
        elapsed = time.perf_counter() - started
        self._rate = count / elapsed if count and elapsed > 0 else self._rate
        # updated_at and last_batch_at are database time, shown in status and compared with
        # nothing. The WHERE guard makes a runner that read a stale position fail instead of writing
        # the same view rows twice.
        cursor.execute(
            "INSERT INTO projection_tracking (name, position, updated_at, processed, rate,"
            " last_batch_at) VALUES (%s, %s, now(), %s, %s, now()) ON CONFLICT (name) DO UPDATE"
            " SET position = EXCLUDED.position, updated_at = now(),"
            " processed = projection_tracking.processed + EXCLUDED.processed,"
            " rate = CASE WHEN EXCLUDED.processed > 0 THEN EXCLUDED.rate"
            " ELSE projection_tracking.rate END,"
            " last_batch_at = CASE WHEN EXCLUDED.processed > 0 THEN now()"
            " ELSE projection_tracking.last_batch_at END"
            " WHERE projection_tracking.position = %s",
            (self.tracking_name, new_position, count, self._rate, old_position),
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

    def catch_up(self) -> int:
        """Run until idle, as a worker loop does: another worker advancing the view meanwhile
        is not an error (it did the work)."""
        try:
            return self.run_until_idle()
        except ConcurrentProjectionError:
            log.info("projection %s advanced by another worker", self.tracking_name)
            return 0

    def status(self) -> ProjectionStatus:
        tracking = self.tracking()
        head = self.recorder.max_notification_id() or 0
        return ProjectionStatus(
            self.tracking_name, tracking.position, head, tracking.rate,
            pending_notifications(self.recorder, tracking.position, self.projection.topics),
            tracking.processed, tracking.updated_at, self.app.name,
        )


def read_tracking(cursor: Cursor, name: str) -> Tracking:
    cursor.execute("SELECT position, processed, rate, updated_at FROM projection_tracking"
                   " WHERE name = %s", (name,))
    row = cursor.fetchone()
    if row is None:
        return Tracking(0, 0, 0.0, None)
    return Tracking(int(row[0]), int(row[1]), float(row[2]), row[3])


def pending_notifications(recorder: ApplicationRecorder, position: int,
                          topics: Sequence[str]) -> int | None:
    """How many notifications after `position` carry one of `topics` (all when empty);
    None when the recorder is not a PostgreSQL one."""
    table = getattr(recorder, "events_table_name", None)
    datastore = getattr(recorder, "datastore", None)
    if table is None or datastore is None or not hasattr(datastore, "schema"):
        return None
    statement = sql.SQL("SELECT count(*) AS n FROM {}.{} WHERE notification_id > %s").format(
        sql.Identifier(datastore.schema), sql.Identifier(table))
    params: list[object] = [position]
    if topics:
        statement += sql.SQL(" AND topic = ANY(%s)")
        params.append(list(topics))
    with datastore.get_connection() as conn, conn.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    return 0 if row is None else int(row["n"])


class PostgresViewRunner:
    """Runs the projections that feed one view (one per application it follows) and its
    refresher, which copies non-event inputs at most every `refresh_seconds`."""

    def __init__(self, name: str, feeds: Sequence[PostgresProjectionRunner], pool: Pool,
                 refresher: Refresher | None = None, refresh_seconds: float = 5.0,
                 lock_key: str | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.tracking_name = name
        self.feeds = list(feeds)
        self.pool = pool
        self.refresher = refresher
        self.refresh_seconds = refresh_seconds
        self.lock_key = lock_key or name
        self._monotonic = monotonic
        self._refreshed_at: float | None = None

    def run_once(self) -> int:
        """One batch of each feed; a feed another runner holds is skipped this time."""
        total = 0
        for feed in self.feeds:
            try:
                total += feed.run_once()
            except ConcurrentProjectionError:
                log.debug("projection %s is busy elsewhere", feed.tracking_name)
        return total

    def run_until_idle(self, on_progress: Callable[[int], None] | None = None) -> int:
        total = 0
        while (count := self.run_once()) > 0:
            total += count
            if on_progress is not None:
                on_progress(total)
        self.refresh(force=False)
        return total

    def catch_up(self) -> int:
        """Run until idle, as a worker loop does: another worker advancing the view meanwhile
        is not an error (it did the work). A view that fails for good is marked FAILED and
        skipped from then on (until rebuilt); transient errors are raised, to retry."""
        if read_failure(self.pool, self.name) is not None:
            return 0
        try:
            return self.run_until_idle()
        except ConcurrentProjectionError:
            log.info("projection %s advanced by another worker", self.tracking_name)
            return 0
        except TRANSIENT_ERRORS:
            raise
        except Exception as error:  # noqa: BLE001 - logged by type: messages may quote values
            reason = mark_failed(self.pool, self.name, error)
            log.error("view %s stopped: %s (%s); other views go on, rebuild it to resume",
                      self.name, reason, type(error).__name__)
            return 0

    def refresh(self, force: bool = True) -> bool:
        """Run the refresher if it is due (or `force`); False if skipped or another writer
        of the view holds its lock."""
        if self.refresher is None:
            return False
        now = self._monotonic()
        if (not force and self._refreshed_at is not None
                and now - self._refreshed_at < self.refresh_seconds):
            return False
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            if not lock_view(cursor, self.lock_key, wait=False):
                return False
            self.refresher.refresh(cursor)
        self._refreshed_at = now
        return True

    def refresh_in(self, cursor: Cursor) -> None:
        """Refresh inside the caller's transaction (which holds the view's lock)."""
        if self.refresher is not None:
            self.refresher.refresh(cursor)

    def catch_up_in(self, cursor: Cursor) -> int:
        return sum(feed.catch_up_in(cursor) for feed in self.feeds)

    def status(self) -> list[ProjectionStatus]:
        return [feed.status() for feed in self.feeds]


class ConcurrentProjectionError(TidesyncError, RuntimeError):
    """Another runner advanced the same projection meanwhile; this batch was rolled back."""

    code = ErrorCode.CHANGED_MEANWHILE

    def __init__(self, name: str) -> None:
        super().__init__(f"projection {name} was advanced by another runner")

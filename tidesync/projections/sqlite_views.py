"""The views the SQLite event store keeps (receipts, which ships pull, and record_head),
and what `shore work` and `tidesync projections status|rebuild` do with them there.

The other views need PostgreSQL; asking for one on SQLite fails with RegistryError
POSTGRES_ONLY. A rebuild runs in place in one write transaction: readers see the old rows
until it commits, and writers (receives, the worker) wait for it.
"""

from __future__ import annotations

import logging
import sqlite3
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from eventsourcing.application import Application

from tidesync.domain.clock import Clock, utc_now
from tidesync.projections.operations import OperationsApplication, OperatorAction
from tidesync.projections.rebuild import RebuildProgress, RebuildResult
from tidesync.projections.registry import Catalogue, RegistryError
from tidesync.projections.sqlite_runner import (
    SQLiteProjection,
    SQLiteProjectionRunner,
    SQLiteReceiptsProjection,
    SQLiteRecordHeadProjection,
)
from tidesync.projections.views import ViewStatus
from tidesync.sqlite_store import SQLiteConnections

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SQLiteViewSpec:
    """A view kept on SQLite: its tables, its projection and the application it follows."""

    name: str
    tables: tuple[str, ...]
    projection: Callable[[], SQLiteProjection]
    application: str = "apply_jobs"


SQLITE_VIEWS: tuple[SQLiteViewSpec, ...] = (
    SQLiteViewSpec("receipts", ("receipt",), SQLiteReceiptsProjection),
    SQLiteViewSpec("record_head", ("record_head",), SQLiteRecordHeadProjection),
)
SQLITE_VIEW_NAMES = frozenset(spec.name for spec in SQLITE_VIEWS)


def sqlite_view(name: str, catalogue: Catalogue | None = None) -> SQLiteViewSpec:
    """The SQLite view `name`; RegistryError POSTGRES_ONLY for a view only PostgreSQL keeps,
    UNKNOWN_VIEW for a name nobody knows."""
    for spec in SQLITE_VIEWS:
        if spec.name == name:
            return spec
    kept = ", ".join(spec.name for spec in SQLITE_VIEWS)
    known = set(SQLITE_VIEW_NAMES)
    if catalogue is not None:
        known |= {view.name for view in catalogue.views}
    if name in known:
        raise RegistryError("POSTGRES_ONLY",
                            f"view {name} is PostgreSQL-only (event_store.kind = embedded or"
                            f" postgres); the SQLite event store keeps {kept}")
    raise RegistryError("UNKNOWN_VIEW", f"no view {name!r} (known: {', '.join(sorted(known))})")


def sqlite_runner(spec: SQLiteViewSpec, apps: Mapping[str, Application[Any]],
                  connections: SQLiteConnections, batch_size: int = 1000,
                  ) -> SQLiteProjectionRunner:
    return SQLiteProjectionRunner(spec.projection(), apps[spec.application], connections,
                                  batch_size=batch_size, tracking_name=spec.name)


def sqlite_runners(apps: Mapping[str, Application[Any]], connections: SQLiteConnections,
                   batch_size: int = 1000) -> list[SQLiteProjectionRunner]:
    """A runner of every view SQLite keeps (what `shore work` keeps current there)."""
    return [sqlite_runner(spec, apps, connections, batch_size) for spec in SQLITE_VIEWS]


def sqlite_view_status(apps: Mapping[str, Application[Any]], connections: SQLiteConnections,
                       name: str | None = None, catalogue: Catalogue | None = None,
                       ) -> list[ViewStatus]:
    """Position, head, events behind and rate of the SQLite views (of `name` only)."""
    specs = [sqlite_view(name, catalogue)] if name is not None else list(SQLITE_VIEWS)
    return [ViewStatus(spec.name, (sqlite_runner(spec, apps, connections).status(),))
            for spec in specs]



def rebuild_sqlite_view(name: str, *, apps: Mapping[str, Application[Any]],
                        connections: SQLiteConnections, actor: str, reason: str,
                        catalogue: Catalogue | None = None, batch_size: int | None = None,
                        on_progress: Callable[[RebuildProgress], None] | None = None,
                        clock: Clock = utc_now,
                        action_id: uuid.UUID | None = None,
                        trace_id: str = "") -> RebuildResult:
    """Rebuild the SQLite view `name` from position 0 in place, in one write transaction, as
    an OperatorAction (Requested, then Completed or Failed) with actor and reason.

    Raises RegistryError (unknown or PostgreSQL-only view), OperatorActionError without actor
    or reason, and whatever stopped the rebuild (recorded as Failed; the view is untouched).
    """
    spec = sqlite_view(name, catalogue)
    operations = apps["operations"]
    assert isinstance(operations, OperationsApplication)
    action = OperatorAction.request(action_id or uuid.uuid4(), "rebuild_projection", name,
                                    clock(), actor, reason, trace_id)
    operations.save(action)
    try:
        result = _rebuild(spec, apps, connections, batch_size or 1000, on_progress, action.id)
    except BaseException as error:
        action.fail(clock(), type(error).__name__, actor, reason, trace_id)
        operations.save(action)
        raise
    action.complete(clock(), {"processed": result.processed,
                              "seconds": round(result.seconds, 3),
                              "positions": dict(result.positions), "rows": dict(result.rows)},
                    actor, "rebuilt in place", trace_id)
    operations.save(action)
    return result


def _rebuild(spec: SQLiteViewSpec, apps: Mapping[str, Application[Any]],
             connections: SQLiteConnections, batch_size: int,
             on_progress: Callable[[RebuildProgress], None] | None,
             action_id: uuid.UUID) -> RebuildResult:
    started = time.monotonic()
    runner = sqlite_runner(spec, apps, connections, batch_size)
    head = runner.recorder.max_notification_id() or 0

    def report(phase: str, processed: int, position: int) -> None:
        if on_progress is not None:
            on_progress(RebuildProgress(spec.name, phase, position, head, processed,
                                        time.monotonic() - started))

    with connections.transaction() as conn:
        cursor = conn.cursor()
        # Under the write lock: no receive or worker writes until the rebuild commits.
        for table in spec.tables:
            cursor.execute(f"DELETE FROM {table}")  # noqa: S608
        cursor.execute("DELETE FROM projection_tracking WHERE name = ?", (runner.tracking_name,))
        report("COPYING", 0, 0)
        processed = runner.catch_up_in(
            cursor, lambda total: report("COPYING", total, _position(cursor, runner)))
        position = _position(cursor, runner)
        rows = {table: int(cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608
                           .fetchone()[0]) for table in spec.tables}
    report("DONE", processed, position)
    log.info("rebuilt view %s on SQLite (%d notifications, action %s)", spec.name, processed,
             action_id)
    return RebuildResult(spec.name, action_id, processed, time.monotonic() - started,
                         {runner.tracking_name: position}, rows)


def _position(cursor: sqlite3.Cursor, runner: SQLiteProjectionRunner) -> int:
    row = cursor.execute("SELECT position FROM projection_tracking WHERE name = ?",
                         (runner.tracking_name,)).fetchone()
    return int(row[0]) if row else 0

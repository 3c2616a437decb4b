"""`tidesync shore work`: the apply processor and the projections, in one loop per process.

Several processes may run side by side: partitions are leased, projections guarded. The event
store is PostgreSQL or the embedded SQLite file, as configured.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import psycopg
from eventsourcing.utils import Environment
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.bootstrap import event_store_env, postgres_conninfo
from tidesync.config import Config, EventStoreKind
from tidesync.migrations import migrate_postgres, migrate_sqlite
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.engine import ConcurrentProjectionError, ProjectionRunner
from tidesync.shore.apps import ApplyJobs, ConflictCases, with_statement_recorder
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.work_queue import PostgresWorkQueue, SQLiteWorkQueue, WorkQueue
from tidesync.sqlite_store import SQLiteConnections
from tidesync.target.contract import TargetApplier

log = logging.getLogger(__name__)


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class ShoreApps:
    """The shore's event-sourced applications over one event store."""

    apply_jobs: ApplyJobs
    conflicts: ConflictCases

    @classmethod
    def open(cls, env: dict[str, str]) -> ShoreApps:
        env = with_statement_recorder(env)
        return cls(ApplyJobs(env=Environment(ApplyJobs.name, env)),
                   ConflictCases(env=Environment(ConflictCases.name, env)))

    def close(self) -> None:
        self.apply_jobs.close()
        self.conflicts.close()


@dataclass
class ShoreWorker:
    """Applies received events until stopped, keeping projections up to date between jobs."""

    processor: ApplyProcessor
    projections: list[ProjectionRunner]
    idle_sleep: float = 0.2
    stop_event: threading.Event = field(default_factory=threading.Event)

    def run_once(self) -> int:
        """One round: apply work while there is some (bounded), then catch projections up."""
        applied = 0
        for _ in range(20):
            count = self.processor.run_once()
            applied += count
            if count == 0:
                break
        for runner in self.projections:
            try:
                runner.run_until_idle()
            except ConcurrentProjectionError:
                log.info("projection %s advanced by another worker", runner.tracking_name)
        return applied

    def run(self) -> None:
        while not self.stop_event.is_set():
            if self.run_once() == 0:
                self.stop_event.wait(self.idle_sleep)

    def stop_on_signals(self) -> None:
        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("stopping after the current job (signal %d)", signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


def open_pool(config: Config) -> ConnectionPool[psycopg.Connection[TupleRow]]:
    """The PostgreSQL event store's database, its tidesync tables migrated.

    Raises NotImplementedError on the SQLite event store, which keeps the apply path and the
    receipts view (`open_work_queue`, `open_sqlite`) but not the console's views."""
    if config.event_store.kind is not EventStoreKind.POSTGRES:
        raise NotImplementedError(
            "this needs event_store.kind = postgres; the embedded SQLite event store keeps "
            "the apply path and receipts only")
    conninfo = postgres_conninfo(config.event_store)
    migrate_postgres(conninfo)
    return ConnectionPool(conninfo, min_size=1, max_size=config.event_store.postgres_pool_size,
                          open=True)


def open_sqlite(config: Config) -> SQLiteConnections:
    """The SQLite event store file, its tidesync tables migrated."""
    path = config.event_store.sqlite_path
    migrate_sqlite(path)
    return SQLiteConnections(path)


def open_work_queue(config: Config) -> WorkQueue:
    """The apply work tables of the configured event store (PostgreSQL or SQLite); `close()`
    releases its connections."""
    if config.event_store.kind is EventStoreKind.SQLITE:
        return SQLiteWorkQueue(open_sqlite(config))
    return PostgresWorkQueue(open_pool(config))


def build_worker(config: Config, applier: TargetApplier,
                 clock: Callable[[], dt.datetime] = utc_now,
                 settings: ProcessorSettings | None = None) -> tuple[ShoreWorker, Any]:
    """A worker over the configured event store; returns it and a closer."""
    queue = open_work_queue(config)
    apps = ShoreApps.open(event_store_env(config.event_store))
    processor = ApplyProcessor(apps.apply_jobs, apps.conflicts, queue, applier, clock, settings)
    if isinstance(queue, SQLiteWorkQueue):
        worker = ShoreWorker(processor, sqlite_projections(apps, queue.connections))
        close_views: Callable[[], None] = _nothing_to_close
    else:
        assert isinstance(queue, PostgresWorkQueue)
        pool = queue.pool
        # Every registered view runs here, each with its position tracked (see projections/).
        catalogue = default_catalogue()
        views = catalogue.open_applications(
            event_store_env(config.event_store),
            existing={"apply_jobs": apps.apply_jobs, "conflict_cases": apps.conflicts})
        worker = ShoreWorker(processor, list(catalogue.runners(views, pool)))
        close_views = views.close

    def close() -> None:
        applier.close()
        close_views()
        apps.close()
        queue.close()

    return worker, close


def _nothing_to_close() -> None:
    pass


def sqlite_projections(apps: ShoreApps,
                       connections: SQLiteConnections) -> list[ProjectionRunner]:
    """The views kept on the SQLite event store: receipts, which ships pull. (The console's
    views are PostgreSQL-only.)"""
    from tidesync.projections.sqlite_runner import (
        SQLiteProjectionRunner,
        SQLiteReceiptsProjection,
    )

    return [SQLiteProjectionRunner(SQLiteReceiptsProjection(), apps.apply_jobs, connections)]


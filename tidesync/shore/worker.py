"""`tidesync shore work`: the apply processor and the projections, in one loop per process.

Several processes may run side by side: partitions are leased, projections guarded.
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
from tidesync.migrations import migrate_postgres
from tidesync.projections.engine import ConcurrentProjectionError, PostgresProjectionRunner
from tidesync.projections.receipts import ReceiptsProjection
from tidesync.shore.apps import ApplyJobs, ConflictCases, with_statement_recorder
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.target import TargetApplier
from tidesync.shore.work_queue import PostgresWorkQueue

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
    projections: list[PostgresProjectionRunner]
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
    if config.event_store.kind is not EventStoreKind.POSTGRES:
        raise NotImplementedError(
            "`shore work` needs event_store.kind = postgres; the embedded SQLite event store "
            "serves the demo only")
    conninfo = postgres_conninfo(config.event_store)
    migrate_postgres(conninfo)
    return ConnectionPool(conninfo, min_size=1, max_size=config.event_store.postgres_pool_size,
                          open=True)


def build_worker(config: Config, applier: TargetApplier,
                 clock: Callable[[], dt.datetime] = utc_now,
                 settings: ProcessorSettings | None = None) -> tuple[ShoreWorker, Any]:
    """A worker over the configured event store; returns it and a closer."""
    pool = open_pool(config)
    apps = ShoreApps.open(event_store_env(config.event_store))
    processor = ApplyProcessor(apps.apply_jobs, apps.conflicts, PostgresWorkQueue(pool),
                               applier, clock, settings)
    receipts = PostgresProjectionRunner(ReceiptsProjection(), apps.apply_jobs, pool)
    worker = ShoreWorker(processor, [receipts])

    def close() -> None:
        applier.close()
        apps.close()
        pool.close()

    return worker, close


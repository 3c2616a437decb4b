"""`tidesync shore work`: the apply processor, the conflict arbiter (PostgreSQL) and the
projections, in one loop per process, and the shore CDC consumer (downlink) in a thread
beside them when `[downlink]` names a broker.

Several processes may run side by side: partitions are leased, projections guarded, and one
process at a time holds the shore CDC consumer. The event store is PostgreSQL (embedded or
the operator's).
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import psycopg
from eventsourcing.utils import Environment
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.bootstrap import event_store_env, postgres_conninfo
from tidesync.config import Config
from tidesync.domain.clock import Clock, utc_now
from tidesync.migrations import migrate_postgres
from tidesync.projections.catalogue import default_catalogue
from tidesync.projections.engine import ConcurrentProjectionError, ProjectionRunner
from tidesync.projections.registry import ViewSettings
from tidesync.shore.apps import ApplyJobs, ConflictCases, with_statement_recorder
from tidesync.shore.arbiter import Arbiter, build_arbiter
from tidesync.shore.processor import ApplyProcessor, ProcessorSettings
from tidesync.shore.shore_cdc import ShoreCdcRunner
from tidesync.shore.work_queue import PostgresWorkQueue, WorkQueue
from tidesync.target.contract import TargetApplier

log = logging.getLogger(__name__)



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
    shore_cdc: ShoreCdcRunner | None = None
    arbiter: Arbiter | None = None

    def run_once(self) -> int:
        """One round: apply work while there is some (bounded), then catch projections up
        (and, with a shore CDC consumer, one batch of shore changes first)."""
        applied = 0 if self.shore_cdc is None else self.shore_cdc.run_once()
        for _ in range(20):
            count = self.processor.run_once()
            applied += count
            if count == 0:
                break
        if self.arbiter is not None:
            try:
                applied += self.arbiter.run_once()
            except Exception:  # the store or target is down: applying goes on, so does this
                log.exception("conflict arbitration failed this round; trying again")
        for runner in self.projections:
            try:
                runner.run_until_idle()
            except ConcurrentProjectionError:
                log.info("projection %s advanced by another worker", runner.tracking_name)
        return applied

    def run(self) -> None:
        # The shore CDC consumer has its own loop: a slow apply must not delay the downlink.
        cdc, self.shore_cdc = self.shore_cdc, None
        thread = None
        if cdc is not None:
            thread = threading.Thread(target=cdc.run, args=(self.stop_event,),
                                      name="shore-cdc", daemon=True)
            thread.start()
        try:
            while not self.stop_event.is_set():
                if self.run_once() == 0:
                    self.stop_event.wait(self.idle_sleep)
        finally:
            self.stop_event.set()
            if thread is not None:
                thread.join(timeout=60)
            self.shore_cdc = cdc

    def stop_on_signals(self) -> None:
        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("stopping after the current job (signal %d)", signum)
            self.stop_event.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


_YOUNG_COLLECTION_ALLOCATIONS = 20_000
"""Allocations between young collections in a worker (Python's default is 700)."""


def settle_startup_heap() -> None:
    """Keep what a started worker holds for good out of the garbage collector's full scans.

    Applying allocates and drops many small objects per job, and every full collection walks
    each tracked object, most of which (modules, applications, pools) live as long as the
    process. Frozen after start, they are no longer walked; what jobs allocate still is, in
    fewer, larger young collections (a job's objects die together when it finishes).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(_YOUNG_COLLECTION_ALLOCATIONS, 10, 10)


def open_pool(config: Config) -> ConnectionPool[psycopg.Connection[TupleRow]]:
    """The PostgreSQL event store's database, its tidesync tables migrated."""
    conninfo = postgres_conninfo(config.event_store)
    migrate_postgres(conninfo)
    return ConnectionPool(conninfo, min_size=1, max_size=config.event_store.postgres_pool_size,
                          open=True)


def open_work_queue(config: Config) -> WorkQueue:
    """The apply work tables of the event store; `close()` releases its connections."""
    return PostgresWorkQueue(open_pool(config))


def build_worker(config: Config, applier: TargetApplier,
                 clock: Clock = utc_now,
                 settings: ProcessorSettings | None = None) -> tuple[ShoreWorker, Any]:
    """A worker over the configured event store; returns it and a closer."""
    queue = open_work_queue(config)
    apps = ShoreApps.open(event_store_env(config.event_store))
    processor = ApplyProcessor(apps.apply_jobs, apps.conflicts, queue, applier, clock, settings)
    assert isinstance(queue, PostgresWorkQueue)
    pool = queue.pool
    # Every registered view runs here, each with its position tracked (see projections/).
    catalogue = default_catalogue(ViewSettings.from_config(config))
    views = catalogue.open_applications(
        event_store_env(config.event_store),
        existing={"apply_jobs": apps.apply_jobs, "conflict_cases": apps.conflicts})
    worker = ShoreWorker(processor, list(catalogue.runners(views, pool)))
    worker.arbiter, close_arbiter = build_arbiter(config, apps.conflicts, pool, clock)

    def close_views() -> None:
        close_arbiter()
        views.close()

    worker.shore_cdc = shore_cdc_runner(config)

    def close() -> None:
        if worker.shore_cdc is not None:
            worker.shore_cdc.close()
        applier.close()
        close_views()
        apps.close()
        queue.close()

    return worker, close


def shore_cdc_runner(config: Config) -> ShoreCdcRunner | None:
    """The shore CDC consumer when `downlink.kafka_bootstrap_servers` is set."""
    if not config.downlink.kafka_bootstrap_servers:
        return None
    from tidesync.shore.shore_cdc import build_shore_cdc

    return build_shore_cdc(config)





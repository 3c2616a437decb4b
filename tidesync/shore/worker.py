"""`tidesync shore work`: the apply processor, the conflict arbiter (PostgreSQL), the rule
activation step and the projections, in one loop per process, and the shore CDC consumer
(downlink) in a thread beside them when `[downlink]` names a broker.

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
from typing import Protocol

from tidesync.apps.apply_jobs import ApplyJobsApplication
from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.apps.recorder import open_application
from tidesync.shore.arbiter import Arbiter
from tidesync.shore.processor import ApplyProcessor
from tidesync.shore.reconcile_repair import ReconcileStep
from tidesync.shore.rule_activation import RuleActivationStep
from tidesync.shore.shore_cdc import ShoreCdcRunner

log = logging.getLogger(__name__)


@dataclass
class ShoreApps:
    """The shore's event-sourced applications over one event store."""

    apply_jobs: ApplyJobsApplication
    conflicts: ConflictCasesApplication

    @classmethod
    def open(cls, env: dict[str, str]) -> ShoreApps:
        return cls(open_application(ApplyJobsApplication, env),
                   open_application(ConflictCasesApplication, env))

    def close(self) -> None:
        self.apply_jobs.close()
        self.conflicts.close()


class ViewRunner(Protocol):
    """What the worker loop needs of a view's runner (the projections engine has them)."""

    def catch_up(self) -> int:
        """Bring the view up to date; returns how many events it took in."""
        ...


@dataclass
class ShoreWorker:
    """Applies received events until stopped, keeping projections up to date between jobs."""

    processor: ApplyProcessor
    projections: list[ViewRunner]
    idle_sleep: float = 0.2
    stop_event: threading.Event = field(default_factory=threading.Event)
    shore_cdc: ShoreCdcRunner | None = None
    arbiter: Arbiter | None = None
    rule_activation: RuleActivationStep | None = None
    reconcile: ReconcileStep | None = None

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
        if self.rule_activation is not None:
            try:
                applied += self.rule_activation.run_once()
            except Exception as error:  # noqa: BLE001 - the stores are down: tried next round
                log.warning("rule activation could not run this round (%s); trying again",
                            type(error).__name__)
        if self.reconcile is not None:
            try:
                applied += self.reconcile.run_once()
            except Exception as error:  # noqa: BLE001 - a store or database is down: next round
                log.warning("reconciliation could not advance this round (%s); trying again",
                            type(error).__name__)
        # One view's trouble must not stop the others (logged by type: messages may quote
        # values); a view that fails for good marks itself FAILED (projections.failures).
        for runner in self.projections:
            try:
                runner.catch_up()
            except Exception as error:  # noqa: BLE001
                log.warning("a view could not catch up this round (%s); trying again",
                            type(error).__name__)
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

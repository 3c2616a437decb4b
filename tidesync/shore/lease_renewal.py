"""Keeps an apply claim's lease while its job runs (§10.3): a daemon thread renews it every
third of the lease, so a chunk slower than the lease (slow target, lock waits) keeps its partition.

Correctness never rests on the renewal: every statement of the job is fenced by owner and token.
The renewal only keeps the lease from lapsing under a live worker; a renewal that finds another
owner is remembered, and the job stops at its next safe point (`check`, between chunks).
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType

from tidesync.shore.work_queue import Claim, LeaseLost, WorkQueue

log = logging.getLogger(__name__)

RENEWALS_PER_LEASE = 3
"""A renewal that fails once (a slow query, a dropped connection) still leaves two tries
before the lease runs out."""


class LeaseRenewal:
    """Renews `claim`'s lease from a thread of its own while the `with` block runs.

    `queue.renew` takes a connection of its own from the pool on each call, so the renewals
    never wait on the job's transactions.
    """

    def __init__(self, queue: WorkQueue, claim: Claim, lease_seconds: float) -> None:
        self.queue = queue
        self.claim = claim
        self.lease_seconds = lease_seconds
        self.interval = lease_seconds / RENEWALS_PER_LEASE
        self.renewals = 0
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"lease-{claim.job_id}")

    def __enter__(self) -> LeaseRenewal:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """End the renewals (the job is over); returns once no renewal runs any more."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def lost(self) -> bool:
        """Whether a renewal found that another worker holds the partition now."""
        return self._lost.is_set()

    def check(self) -> None:
        """A safe point of the job: raises `LeaseLost` once a renewal found the lease gone."""
        if self.lost:
            raise LeaseLost(f"apply job {self.claim.job_id} lost its lease")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.queue.renew(self.claim, self.lease_seconds)
            except LeaseLost:
                self._lost.set()
                log.warning("apply job %s lost its lease while it ran; stopping at the next"
                            " chunk", self.claim.job_id)
                return
            except Exception as error:  # noqa: BLE001 (the next renewal tries again)
                log.warning("renewing the lease of apply job %s failed (%s); trying again",
                            self.claim.job_id, type(error).__name__)
                continue
            self.renewals += 1

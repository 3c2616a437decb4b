"""Operator views of apply work: what is dead, rejected or waiting, replay by error class, and
replay or skip of one event.

A replay or skip is an event on each affected ApplyJob stream, carrying who asked and why, saved
with the work index updates that send the events back to PENDING (a skipped one marked to be
finalized REJECTED as SKIPPED_BY_OPERATOR, in its source order, without touching the target).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tidesync.apps.apply_jobs import ApplyJobsApplication
from tidesync.apps.recorder import Statement
from tidesync.domain.apply_job import REPLAYABLE_CLASSES, ErrorClass
from tidesync.domain.errors import ErrorCode, TidesyncError

OpenEventCount = tuple[str, str, str | None, str | None, str | None, int]
"""(origin node, state, result, error class, reason code, events) of events not applied."""

ReplayItem = tuple[str, uuid.UUID, tuple[str, str, int, int]]
"""(origin node, event id, partition key) of one event to replay."""


SKIPPED_BY_OPERATOR = "SKIPPED_BY_OPERATOR"


@dataclass(frozen=True)
class HeldEvent:
    """One received event as the work index holds it."""

    job_id: uuid.UUID | None
    state: str
    result: str | None
    error_class: str | None
    item: ReplayItem

    @property
    def dead_or_rejected(self) -> bool:
        return self.job_id is not None and (
            self.state == "DEAD" or (self.state == "TERMINAL" and self.result == "REJECTED"))


class JobQueue(Protocol):
    """What the operator views need of the apply work index."""

    def open_event_counts(self, node: str | None = None) -> list[OpenEventCount]: ...

    def replayable(self, error_class: str, node: str | None = None
                   ) -> dict[uuid.UUID, list[ReplayItem]]: ...

    def replay_statements(self, items: Sequence[ReplayItem]) -> list[Statement]: ...

    def skip_statements(self, items: Sequence[ReplayItem]) -> list[Statement]: ...

    def held_event(self, node: str, event_id: uuid.UUID) -> HeldEvent | None: ...


@dataclass(frozen=True)
class JobSummaryRow:
    origin_node_id: str
    state: str
    result: str | None
    error_class: str | None
    reason_code: str | None
    events: int


class ReplayRefused(TidesyncError):
    """The requested class may not be replayed (MALFORMED never is), or the event is not
    dead or rejected."""

    code = ErrorCode.REFUSED


def summarize(queue: JobQueue, node: str | None = None) -> list[JobSummaryRow]:
    """Counts of non-applied events by node, state, result, class and reason."""
    return [JobSummaryRow(*row) for row in queue.open_event_counts(node)]


def replay(queue: JobQueue, apply_jobs: ApplyJobsApplication, error_class: ErrorClass, actor: str,
           reason: str, node: str | None = None) -> int:
    """Send DEAD or REJECTED events of one class back to PENDING; returns how many."""
    if error_class not in REPLAYABLE_CLASSES:
        raise ReplayRefused(f"{error_class} events are never replayed")
    if not reason.strip():
        raise ReplayRefused("a replay needs a reason")
    by_job = queue.replayable(error_class.value, node)
    for job_id, events in by_job.items():
        job = apply_jobs.get_job(job_id)
        ids = [str(event_id) for _, event_id, _ in events]
        job.replayed(ids, error_class.value, actor, reason)
        apply_jobs.save(job, extra_statements=queue.replay_statements(events))
    return sum(len(events) for events in by_job.values())


def replay_event(queue: JobQueue, apply_jobs: ApplyJobsApplication, node: str,
                 event_id: uuid.UUID, actor: str, reason: str) -> None:
    """Send one DEAD or REJECTED event back to PENDING (never a MALFORMED one)."""
    held = _held(queue, node, event_id, reason)
    if held.error_class == ErrorClass.MALFORMED.value:
        raise ReplayRefused("MALFORMED events are never replayed")
    job = apply_jobs.get_job(held.job_id)
    job.replayed([str(event_id)], held.error_class or "", actor, reason)
    apply_jobs.save(job, extra_statements=queue.replay_statements([held.item]))


def skip_event(queue: JobQueue, apply_jobs: ApplyJobsApplication, node: str,
               event_id: uuid.UUID, actor: str, reason: str) -> None:
    """Give up on one DEAD or REJECTED event: it ends REJECTED as SKIPPED_BY_OPERATOR."""
    held = _held(queue, node, event_id, reason)
    job = apply_jobs.get_job(held.job_id)
    job.skip_requested([str(event_id)], actor, reason)
    apply_jobs.save(job, extra_statements=queue.skip_statements([held.item]))


def _held(queue: JobQueue, node: str, event_id: uuid.UUID, reason: str) -> HeldEvent:
    if not reason.strip():
        raise ReplayRefused("a replay or skip needs a reason")
    held = queue.held_event(node, event_id)
    if held is None or not held.dead_or_rejected:
        raise ReplayRefused(f"event {event_id} of node {node} is not dead or rejected")
    return held

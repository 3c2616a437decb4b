"""Operator views of apply work: what is dead, rejected or waiting, and replay by error class.

A replay is an event on each affected ApplyJob stream, carrying who asked and why, saved with the
work index updates that send the events back to PENDING.
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


class JobQueue(Protocol):
    """What the operator views need of the apply work index."""

    def open_event_counts(self, node: str | None = None) -> list[OpenEventCount]: ...

    def replayable(self, error_class: str, node: str | None = None
                   ) -> dict[uuid.UUID, list[ReplayItem]]: ...

    def replay_statements(self, items: Sequence[ReplayItem]) -> list[Statement]: ...


@dataclass(frozen=True)
class JobSummaryRow:
    origin_node_id: str
    state: str
    result: str | None
    error_class: str | None
    reason_code: str | None
    events: int


class ReplayRefused(TidesyncError):
    """The requested class may not be replayed (MALFORMED never is)."""

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

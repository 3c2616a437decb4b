"""Operator views of apply work: what is dead, rejected or waiting, and replay by error class.

A replay is an event on each affected ApplyJob stream, carrying who asked and why.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.domain.apply_job import REPLAYABLE_CLASSES, ErrorClass
from tidesync.shore.apps import ApplyJobs, Statement


@dataclass(frozen=True)
class JobSummaryRow:
    origin_node_id: str
    state: str
    result: str | None
    error_class: str | None
    reason_code: str | None
    events: int


class ReplayRefused(Exception):
    """The requested class may not be replayed (MALFORMED never is)."""


def summarize(pool: ConnectionPool[psycopg.Connection[TupleRow]],
              node: str | None = None) -> list[JobSummaryRow]:
    """Counts of non-applied events by node, state, result, class and reason."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT origin_node_id, state, result, error_class, reason_code, count(*)"
            " FROM inbox_event WHERE (state <> 'TERMINAL' OR result <> 'APPLIED')"
            " AND (%(node)s::text IS NULL OR origin_node_id = %(node)s)"
            " GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5",
            {"node": node},
        ).fetchall()
    return [JobSummaryRow(*row) for row in rows]


def replay(pool: ConnectionPool[psycopg.Connection[TupleRow]], apply_jobs: ApplyJobs,
           error_class: ErrorClass, actor: str, reason: str,
           node: str | None = None) -> int:
    """Send DEAD or REJECTED events of one class back to PENDING; returns how many."""
    if error_class not in REPLAYABLE_CLASSES:
        raise ReplayRefused(f"{error_class} events are never replayed")
    if not reason.strip():
        raise ReplayRefused("a replay needs a reason")
    by_job = _replayable(pool, error_class, node)
    for job_id, events in by_job.items():
        job = apply_jobs.get_job(job_id)
        ids = [str(event_id) for _, event_id, _ in events]
        job.replayed(ids, error_class.value, actor, reason)
        apply_jobs.save(job, extra_statements=_reset_statements(events))
    return sum(len(events) for events in by_job.values())


ReplayItem = tuple[str, uuid.UUID, tuple[object, ...]]
"""(origin node, event id, partition key) of one event to replay."""


def _replayable(pool: ConnectionPool[psycopg.Connection[TupleRow]], error_class: ErrorClass,
                node: str | None) -> dict[uuid.UUID, list[ReplayItem]]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT job_id, origin_node_id, event_id, source_topic, source_partition,"
            " replay_epoch FROM inbox_event"
            " WHERE error_class = %(class)s AND job_id IS NOT NULL"
            " AND (state = 'DEAD' OR (state = 'TERMINAL' AND result = 'REJECTED'))"
            " AND (%(node)s::text IS NULL OR origin_node_id = %(node)s)",
            {"class": error_class.value, "node": node},
        ).fetchall()
    by_job: dict[uuid.UUID, list[ReplayItem]] = defaultdict(list)
    for job_id, origin, event_id, topic, partition, epoch in rows:
        by_job[job_id].append((origin, event_id, (origin, topic, partition, epoch)))
    return by_job


def _reset_statements(events: list[ReplayItem]) -> list[Statement]:
    statements: list[Statement] = []
    for origin, event_id, _ in events:
        statements.append((
            "UPDATE inbox_event SET state = 'PENDING', job_id = NULL, attempts = 0,"
            " result = NULL, reason_code = NULL, terminal_at = NULL"
            " WHERE origin_node_id = %s AND event_id = %s", (origin, event_id)))
    for partition in {p for _, _, p in events}:
        statements.append((
            "UPDATE apply_partition SET not_before = NULL, attempts = 0"
            " WHERE origin_node_id = %s AND source_topic = %s AND source_partition = %s"
            " AND replay_epoch = %s", partition))
    return statements

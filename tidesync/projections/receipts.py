"""The receipts view: terminal results of uplink events, in the order ships pull them.

A single writer appends rows with increasing `seq`, so a ship's cursor never skips a row
that commits later with a lower number.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from eventsourcing.domain import DomainEventProtocol

from tidesync.domain.apply_job import ApplyJob, FinalResult
from tidesync.projections.engine import Cursor, event_topic


class ReceiptsProjection:
    name = "receipts"
    topics: tuple[str, ...] = (event_topic(ApplyJob.Finalized),)  # type: ignore[attr-defined]

    def __init__(self, table: str = "receipt") -> None:
        self.table = table

    def process(self, cursor: Cursor,
                events: Sequence[tuple[int, DomainEventProtocol[Any]]]) -> None:
        rows: list[tuple[object, ...]] = []
        for _, event in events:
            job = _job_fields(event)
            for raw in event.results:  # type: ignore[attr-defined]
                final = FinalResult.from_row(raw)
                rows.append((
                    job[0], final.event_id, final.result.value, final.reason_code or None,
                    final.conflict_id,
                    uuid.UUID(final.result_revision).bytes if final.result_revision else None,
                    event.timestamp,  # type: ignore[attr-defined]
                    job[1], job[2], final.position,
                ))
        if not rows:
            return
        cursor.execute(f"SELECT COALESCE(max(seq), 0) FROM {self.table}")  # noqa: S608
        first = cursor.fetchone()
        start = int(first[0]) if first else 0
        cursor.executemany(
            f"INSERT INTO {self.table} (seq, origin_node_id, event_id, result, reason_code,"  # noqa: S608
            " conflict_id, result_revision, decided_at, source_topic, source_partition,"
            " source_position) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(start + i + 1, *row) for i, row in enumerate(rows)],
        )


def _job_fields(event: DomainEventProtocol[Any]) -> tuple[str, str, int]:
    """origin node, topic and partition of the job an event belongs to (carried on it)."""
    return (event.origin_node_id, event.topic, event.partition)  # type: ignore[attr-defined]

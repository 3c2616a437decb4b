"""The receipts view: terminal results of uplink events, in the order ships pull them.

A single writer appends rows with increasing `seq`, so a ship's cursor never skips a row
that commits later with a lower number. Rebuilt from the same log, it numbers them the same.
"""

from __future__ import annotations

from typing import Any

from tidesync.domain.apply_job import ApplyJob
from tidesync.projections.engine import Cursor, Events, event_topic

# Rows of FinalResult.as_row(): event_id, result, reason, conflict_id, result_revision,
# position, ...
_EVENT_ID, _RESULT, _REASON, _CONFLICT, _REVISION, _POSITION = range(6)


class ReceiptsProjection:
    name = "receipts"
    topics: tuple[str, ...] = (event_topic(ApplyJob.Finalized),)  # type: ignore[attr-defined]

    def __init__(self, table: str = "receipt") -> None:
        self.table = table

    def process(self, cursor: Cursor, events: Events) -> None:
        columns = receipt_columns(events)
        if not columns[0]:
            return
        cursor.execute(f"SELECT COALESCE(max(seq), 0) FROM {self.table}")  # noqa: S608
        first = cursor.fetchone()
        start = int(first[0]) if first else 0
        cursor.execute(
            f"INSERT INTO {self.table} (seq, origin_node_id, event_id, result, reason_code,"  # noqa: S608
            " conflict_id, result_revision, decided_at, source_topic, source_partition,"
            " source_position)"
            " SELECT %s + u.n, u.origin, u.event_id::uuid, u.result, u.reason,"
            " u.conflict::uuid, uuid_send(u.revision::uuid), u.at, u.topic, u.part, u.pos"
            " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
            " %b::text[], %b::timestamptz[], %b::text[], %b::int4[], %b::int8[])"
            " WITH ORDINALITY AS u(origin, event_id, result, reason, conflict, revision, at,"
            " topic, part, pos, n)",
            (start, *columns),
        )


def receipt_columns(events: Events) -> tuple[list[Any], ...]:
    """The receipt rows of these Finalized events, column by column: origin, event id, result,
    reason, conflict id, result revision (UUID text), decided at, topic, partition, position."""
    columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [], [], [])
    (origins, event_ids, results, reasons, conflicts, revisions, decided, topics,
     partitions, positions) = columns
    for _, event in events:
        origin, topic, partition = _job_fields(event)
        at = event.timestamp  # type: ignore[attr-defined]
        for row in event.results:  # type: ignore[attr-defined]
            origins.append(origin)
            event_ids.append(row[_EVENT_ID])
            results.append(row[_RESULT])
            reasons.append(row[_REASON] or None)
            conflicts.append(row[_CONFLICT])
            revisions.append(row[_REVISION])
            decided.append(at)
            topics.append(topic)
            partitions.append(partition)
            positions.append(row[_POSITION] or 0)
    return columns


def _job_fields(event: Any) -> tuple[str, str, int]:
    """origin node, topic and partition of the job an event belongs to (carried on it)."""
    return (event.origin_node_id, event.topic, event.partition)

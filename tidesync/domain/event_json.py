"""The JSON form of a change event that tools print: every §6.1 field, values exact.

Decimals print as strings, datetimes as ISO-8601 UTC with Z, bytes as base64 (value_to_json).
"""

from __future__ import annotations

from tidesync.domain.change_event import ChangeEvent, Revision
from tidesync.domain.values import row_to_json, value_to_json


def change_event_to_json(event: ChangeEvent) -> dict[str, object]:
    """A JSON-able dict of the event, fields in §6.1 order."""
    return {
        "schema_version": event.schema_version,
        "event_id": str(event.event_id),
        "origin_node_id": event.origin_node_id,
        "source_connector_id": event.source_connector_id,
        "source_topic": event.source_topic,
        "source_partition": event.source_partition,
        "source_position": event.source_position,
        "source_sequence": event.source_sequence,
        "transaction_id": event.transaction_id,
        "transaction_order": event.transaction_order,
        "rule_id": event.rule_id,
        "rule_version": event.rule_version,
        "database": event.database,
        "schema": event.schema,
        "table": event.table,
        "primary_key": {name: value_to_json(value) for name, value in event.record.primary_key},
        "operation": event.operation.value,
        "before": row_to_json(event.before),
        "after": row_to_json(event.after),
        "base_revision": _revision_text(event.base_revision),
        "result_revision": _revision_text(event.result_revision),
        "business_occurred_at": value_to_json(event.business_occurred_at),
        "captured_at": value_to_json(event.captured_at),
        "trace_id": event.trace_id,
        "replay_epoch": event.replay_epoch,
        "source_details": row_to_json(event.source_details),
    }


def _revision_text(revision: Revision | None) -> str | None:
    return None if revision is None else revision.text

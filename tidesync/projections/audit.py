"""The audit view (§17.3): every operator action in every application — each event whose actor
is not a `system:` actor — with who, why, when, and digests of the aggregate's state before and
after it (never values). One feed per application appends to the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eventsourcing.application import Application

from tidesync.projections.engine import Cursor, Events
from tidesync.projections.states import StreamStates, aggregate_topic, event_type, state_digest
from tidesync.projections.text import storable_text

SYSTEM_ACTOR_PREFIX = "system:"


def is_operator_event(event: object) -> bool:
    """An event an operator caused: its actor is not a `system:` one. Events that name no
    actor count too (an action nobody owns must still be seen), except snapshots."""
    if type(event).__name__ == "Snapshot":
        return False
    actor = getattr(event, "actor", None)
    return not (isinstance(actor, str) and actor.startswith(SYSTEM_ACTOR_PREFIX))


class AuditProjection:
    name = "audit"
    topics: tuple[str, ...] = ()

    def __init__(self, application: str, app: Application[Any],
                 kind_name: Callable[[str], str], table: str = "audit_event") -> None:
        self.application = application
        self.table = table
        self.kind_name = kind_name
        self._states = StreamStates(app.repository, capacity=64)

    def process(self, cursor: Cursor, events: Events) -> None:
        rows = [self._row(notification_id, event) for notification_id, event in events
                if is_operator_event(event)]
        if not rows:
            return
        cursor.execute(f"SELECT COALESCE(max(seq), 0) FROM {self.table}")  # noqa: S608
        first = cursor.fetchone()
        start = int(first[0]) if first else 0
        cursor.executemany(
            f"INSERT INTO {self.table} (seq, application, aggregate_kind, aggregate_id,"  # noqa: S608
            " version, event_type, actor, reason, occurred_at, before_digest, after_digest,"
            " trace_id, log_position) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " %s)",
            [(start + index + 1, *row) for index, row in enumerate(rows)],
        )

    def _row(self, notification_id: int, event: Any) -> tuple[object, ...]:
        before = self._states.before(event)
        before_digest = None if before is None else state_digest(before)
        after_digest = state_digest(self._states.advance(event))
        return (self.application, self.kind_name(aggregate_topic(event)), event.originator_id,
                event.originator_version, event_type(event),
                storable_text(getattr(event, "actor", "")),
                storable_text(getattr(event, "reason", None)), event.timestamp, before_digest,
                after_digest, storable_text(getattr(event, "trace_id", None)), notification_id)

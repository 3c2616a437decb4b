"""Audit types: operator actions (who, what, when, why, state digests) and aggregate history."""

from __future__ import annotations

import datetime as dt

import strawberry

from tidesync.graphql.audit.loaders import AuditRow
from tidesync.graphql.common import JSON, Long
from tidesync.projections.history import AggregateState, FieldChange, HistoryEvent


@strawberry.type(description="An operator action: one event whose actor is not the system, "
                             "with digests of the aggregate's state before and after it.")
class AuditEvent:
    seq: Long
    application: str
    aggregate_kind: str
    aggregate_id: strawberry.ID
    version: Long
    event_type: str
    actor: str
    reason: str | None
    occurred_at: dt.datetime
    before_digest: str | None
    after_digest: str
    trace_id: str | None

    @classmethod
    def from_row(cls, row: AuditRow) -> AuditEvent:
        return cls(
            seq=Long(row.seq), application=row.application, aggregate_kind=row.aggregate_kind,
            aggregate_id=strawberry.ID(str(row.aggregate_id)), version=Long(row.version),
            event_type=row.event_type, actor=row.actor, reason=row.reason,
            occurred_at=row.occurred_at, before_digest=row.before_digest,
            after_digest=row.after_digest, trace_id=row.trace_id,
        )


@strawberry.type(description="One event of an aggregate's stream.")
class HistoryEntry:
    version: Long
    event_type: str
    actor: str | None
    reason: str | None
    trace_id: str | None
    occurred_at: dt.datetime

    @classmethod
    def of(cls, event: HistoryEvent) -> HistoryEntry:
        return cls(version=Long(event.version), event_type=event.event_type, actor=event.actor,
                   reason=event.reason, trace_id=event.trace_id, occurred_at=event.occurred_at)


@strawberry.type(description="An aggregate as of one version: fields that may hold business "
                             "data appear as digests or summaries; `digest` covers the full "
                             "state (as the audit view records it).")
class AggregateSnapshot:
    version: Long
    modified_on: dt.datetime
    digest: str
    state: JSON

    @classmethod
    def of(cls, state: AggregateState) -> AggregateSnapshot:
        return cls(version=Long(state.version), modified_on=state.modified_on,
                   digest=state.digest, state=JSON(state.state))


@strawberry.type(description="One difference between two versions (`path`: field, "
                             "field.key or field[i]; `change`: added, removed or changed).")
class FieldDifference:
    path: str
    change: str
    before: JSON | None
    after: JSON | None

    @classmethod
    def of(cls, change: FieldChange) -> FieldDifference:
        return cls(path=change.path, change=change.change, before=JSON(change.before),
                   after=JSON(change.after))


@strawberry.type(description="An aggregate's stream replayed for an auditor.")
class AggregateHistory:
    kind: str
    aggregate_id: strawberry.ID
    events: list[HistoryEntry]
    state: AggregateSnapshot
    changes: list[FieldDifference] | None = strawberry.field(
        description="What changed from `diffFrom` to `state.version` (when asked).")

"""Audit queries (§17.3): operator actions across applications, filtered and paged."""

from __future__ import annotations

import datetime as dt
import uuid

import strawberry

from tidesync.graphql.audit.loaders import AuditFilter, fetch_audit_events
from tidesync.graphql.audit.types import (
    AggregateHistory,
    AggregateSnapshot,
    AuditEvent,
    FieldDifference,
    HistoryEntry,
)
from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.console import Console
from tidesync.graphql.context import Info
from tidesync.graphql.errors import BadUserInput
from tidesync.graphql.permissions import CanReadAudit, allow
from tidesync.projections.history import (
    HistoryError,
    aggregate_events,
    diff_versions,
    state_at,
)


@strawberry.input(description="Which audit events to list; every given condition must hold.")
class AuditFilterInput:
    application: str | None = None
    aggregate_kind: str | None = None
    aggregate_id: strawberry.ID | None = None
    actor: str | None = None
    event_type: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    def to_filter(self) -> AuditFilter:
        aggregate_id = None
        if self.aggregate_id is not None:
            try:
                aggregate_id = uuid.UUID(str(self.aggregate_id))
            except ValueError:
                raise BadUserInput("aggregateId is not a UUID") from None
        return AuditFilter(self.application, self.aggregate_kind, aggregate_id, self.actor,
                           self.event_type, _aware(self.since), _aware(self.until))


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    if moment is not None and moment.tzinfo is None:
        raise BadUserInput("times need a zone (e.g. 2026-11-30T12:00:00Z)")
    return moment


@strawberry.type
class AuditQueries:
    @field(extensions=allow(CanReadAudit), description="Operator actions in the order recorded.")
    async def audit_events(self, info: Info, filter: AuditFilterInput | None = None,
                           first: int | None = None, after: str | None = None,
                           wait_for: str | None = None) -> Page[AuditEvent]:
        context = info.context
        size = context.console.limits.page_size(first)
        key = decode_cursor(after, 1)
        after_seq = 0 if key is None else key[0]
        if not isinstance(after_seq, int) or isinstance(after_seq, bool):
            raise BadUserInput("not a cursor from this list")
        where = (filter or AuditFilterInput()).to_filter()
        rows = await context.read(fetch_audit_events, context.console.pool, where, after_seq,
                                  size + 1, wait_for=wait_for)
        await context.audit_read("read_audit_events", "audit_event")
        return page_of(rows, size, lambda row: [row.seq], AuditEvent.from_row)


def _history(console: Console, kind: str, aggregate_id: str, version: int | None,
             at: dt.datetime | None, diff_from: int | None) -> AggregateHistory | None:
    apps = console.apps().every
    catalogue = console.catalogue
    try:
        events = aggregate_events(apps, kind, aggregate_id, catalogue)
        state = state_at(apps, kind, aggregate_id, version=version, at=at, catalogue=catalogue)
        changes = None if diff_from is None else diff_versions(
            apps, kind, aggregate_id, diff_from, state.version, catalogue)
    except HistoryError as error:
        if error.code == "NOT_FOUND":
            return None
        raise BadUserInput(error.message, reason=error.code) from None
    return AggregateHistory(
        kind=kind, aggregate_id=strawberry.ID(str(state.aggregate_id)),
        events=[HistoryEntry.of(event) for event in events], state=AggregateSnapshot.of(state),
        changes=None if changes is None else [FieldDifference.of(c) for c in changes])


@strawberry.type
class HistoryQueries:
    @field(extensions=allow(CanReadAudit),
           description="Aggregate kinds whose history can be replayed.")
    def aggregate_kinds(self, info: Info) -> list[str]:
        return sorted(kind.name for kind in info.context.console.catalogue.kinds)

    @field(extensions=allow(CanReadAudit),
           description="Any aggregate's events, its state as of a version or time (default: "
                       "now), and optionally what changed since version `diffFrom`.")
    async def aggregate_history(self, info: Info, kind: str, id: strawberry.ID,
                                version: int | None = None, at: dt.datetime | None = None,
                                diff_from: int | None = None) -> AggregateHistory | None:
        history = await info.context.read(_history, info.context.console, kind, str(id),
                                          version, _aware(at), diff_from)
        if history is not None:
            await info.context.audit_read("read_aggregate_history",
                                          f"{kind}:{history.aggregate_id}")
        return history

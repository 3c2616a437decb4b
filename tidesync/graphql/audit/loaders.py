"""Audit rows (the audit_event view): operator actions from every application, in order."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class AuditRow:
    seq: int
    application: str
    aggregate_kind: str
    aggregate_id: uuid.UUID
    version: int
    event_type: str
    actor: str
    reason: str | None
    occurred_at: dt.datetime
    before_digest: str | None
    after_digest: str
    trace_id: str | None


@dataclass(frozen=True)
class AuditFilter:
    application: str | None = None
    aggregate_kind: str | None = None
    aggregate_id: uuid.UUID | None = None
    actor: str | None = None
    event_type: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def fetch_audit_events(pool: Pool, where: AuditFilter, after_seq: int,
                       limit: int) -> list[AuditRow]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT seq, application, aggregate_kind, aggregate_id, version, event_type, actor,"
            " reason, occurred_at, before_digest, after_digest, trace_id FROM audit_event"
            " WHERE seq > %(after)s"
            " AND (%(application)s::text IS NULL OR application = %(application)s)"
            " AND (%(kind)s::text IS NULL OR aggregate_kind = %(kind)s)"
            " AND (%(aggregate)s::uuid IS NULL OR aggregate_id = %(aggregate)s)"
            " AND (%(actor)s::text IS NULL OR actor = %(actor)s)"
            " AND (%(type)s::text IS NULL OR event_type = %(type)s)"
            " AND (%(since)s::timestamptz IS NULL OR occurred_at >= %(since)s)"
            " AND (%(until)s::timestamptz IS NULL OR occurred_at < %(until)s)"
            " ORDER BY seq LIMIT %(limit)s",
            {"after": after_seq, "application": where.application,
             "kind": where.aggregate_kind, "aggregate": where.aggregate_id,
             "actor": where.actor, "type": where.event_type, "since": where.since,
             "until": where.until, "limit": limit}).fetchall()
    return [AuditRow(*row) for row in rows]

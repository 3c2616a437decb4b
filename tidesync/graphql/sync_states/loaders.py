"""Snapshot and catch-up states read from PostgreSQL: each node's latest report per rule and
per table (`rule_sync_state`, written from the nodes' heartbeats)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class SyncStateRow:
    node_id: str
    subject: str
    rule_id: str | None
    rule_version: int
    table_name: str
    phase: str
    snapshot_id: int | None
    rows_sent: int
    rows_total: int | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    lag_records: int
    sent_at: dt.datetime
    reported_at: dt.datetime
    in_sync_since: dt.datetime | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.node_id, self.subject)


@dataclass(frozen=True)
class SyncStateFilter:
    node_id: str | None = None
    rule_id: str | None = None
    table: str | None = None


_SYNC_STATES = (
    "SELECT node_id, subject, rule_id, rule_version, table_name, phase, snapshot_id,"
    " rows_sent, rows_total, started_at, finished_at, lag_records, sent_at, reported_at,"
    " in_sync_since"
    " FROM rule_sync_state"
    " WHERE (%(node)s::text IS NULL OR node_id = %(node)s)"
    " AND (%(rule)s::text IS NULL OR rule_id = %(rule)s)"
    " AND (%(table)s::text IS NULL OR table_name = %(table)s)"
    " AND (NOT %(has_after)s OR (node_id, subject) > (%(a_node)s::text, %(a_subject)s::text))"
    " ORDER BY node_id, subject LIMIT %(limit)s"
)


def fetch_sync_states(pool: Pool, where: SyncStateFilter, after: list[object] | None,
                      limit: int) -> list[SyncStateRow]:
    """Up to `limit` states after the (node, subject) key `after`, in key order."""
    params = {"node": where.node_id, "rule": where.rule_id, "table": where.table,
              "limit": limit, "has_after": after is not None,
              "a_node": str(after[0]) if after else None,
              "a_subject": str(after[1]) if after else None}
    with pool.connection() as conn:
        rows = conn.execute(_SYNC_STATES, params).fetchall()
    return [SyncStateRow(*row) for row in rows]

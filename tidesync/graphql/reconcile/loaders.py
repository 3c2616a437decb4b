"""The consistency sentinel read from PostgreSQL: the last reconciliation over the link of each
node and subject (`reconcile_exchange`, written by the shore's reconciliation)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class SentinelRow:
    exchange_id: uuid.UUID
    node_id: str
    subject: str
    state: str
    differing_count: int | None
    rows_compared: int
    messages: int
    link_bytes: int
    started_at: dt.datetime
    ended_at: dt.datetime | None
    error: str
    repaired_at: dt.datetime | None
    differing_keys: list[list[object]] | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.node_id, self.subject)

    @property
    def keys_text(self) -> list[str]:
        """Each differing key as compact JSON of its type-tagged values."""
        return [json.dumps(key, separators=(",", ":"), ensure_ascii=False)
                for key in self.differing_keys or []]


_SENTINEL = (
    "SELECT DISTINCT ON (node_id, subject) exchange_id, node_id, subject, state,"
    " differing_count, rows_compared, messages, link_bytes, started_at, ended_at, error,"
    " repaired_at, differing_keys FROM reconcile_exchange"
    " WHERE (%(node)s::text IS NULL OR node_id = %(node)s)"
    " AND (%(subject)s::text IS NULL OR subject = %(subject)s)"
    " AND (NOT %(has_after)s OR (node_id, subject) > (%(a_node)s::text, %(a_subject)s::text))"
    " ORDER BY node_id, subject, started_order DESC LIMIT %(limit)s"
)


def fetch_sentinel(pool: Pool, node_id: str | None, subject: str | None,
                   after: list[object] | None, limit: int) -> list[SentinelRow]:
    """Up to `limit` last exchanges after the (node, subject) key `after`, in key order."""
    params = {"node": node_id, "subject": subject, "limit": limit,
              "has_after": after is not None,
              "a_node": str(after[0]) if after else None,
              "a_subject": str(after[1]) if after else None}
    with pool.connection() as conn:
        rows = conn.execute(_SENTINEL, params).fetchall()
    return [SentinelRow(*row) for row in rows]

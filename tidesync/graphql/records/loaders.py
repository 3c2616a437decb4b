"""Record head rows (the record_head view): the shore's current revision of each record."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class RecordHeadRow:
    rule_id: str
    key_digest: str
    record_key: str
    database: str
    table_name: str
    revision: uuid.UUID | None
    origin_node_id: str
    last_event_id: uuid.UUID
    tombstone: bool
    updated_at: dt.datetime


@dataclass(frozen=True)
class RecordHeadFilter:
    rule_id: str | None = None
    database: str | None = None
    table: str | None = None
    key_digest: str | None = None
    """A shown (keyed) key digest."""
    origin_node_id: str | None = None
    key_pads: tuple[bytes, bytes] = (b"", b"")
    """The inner and outer HMAC pads that turn a stored key digest into a shown one."""


def fetch_record_heads(pool: Pool, where: RecordHeadFilter, after: Sequence[object] | None,
                       limit: int) -> list[RecordHeadRow]:
    after_rule, after_digest = (str(after[0]), str(after[1])) if after else (None, None)
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT rule_id, key_digest, record_key, database, table_name, revision,"
            " origin_node_id, last_event_id, tombstone, updated_at FROM record_head"
            " WHERE (%(rule)s::text IS NULL OR rule_id = %(rule)s)"
            " AND (%(database)s::text IS NULL OR database = %(database)s)"
            " AND (%(table)s::text IS NULL OR table_name = %(table)s)"
            " AND (%(digest)s::text IS NULL OR encode(sha256(%(outer)s::bytea"
            " || sha256(%(inner)s::bytea || convert_to(key_digest, 'UTF8'))), 'hex')"
            " = %(digest)s)"
            " AND (%(origin)s::text IS NULL OR origin_node_id = %(origin)s)"
            " AND (%(after_rule)s::text IS NULL OR (rule_id, key_digest) >"
            " (%(after_rule)s::text, %(after_digest)s::text))"
            " ORDER BY rule_id, key_digest LIMIT %(limit)s",
            {"rule": where.rule_id, "database": where.database, "table": where.table,
             "digest": where.key_digest, "origin": where.origin_node_id,
             "inner": where.key_pads[0], "outer": where.key_pads[1],
             "after_rule": after_rule, "after_digest": after_digest, "limit": limit},
        ).fetchall()
    return [RecordHeadRow(*row) for row in rows]

"""Receipt rows (the receipt view): terminal results per node, in the order ships pull them."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class ReceiptRow:
    seq: int
    origin_node_id: str
    event_id: uuid.UUID
    result: str
    reason_code: str | None
    conflict_id: uuid.UUID | None
    result_revision: bytes | None
    decided_at: dt.datetime
    source_topic: str
    source_partition: int
    source_position: int


def fetch_receipts(pool: Pool, node_id: str, after_seq: int, limit: int,
                   result: str | None) -> list[ReceiptRow]:
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT seq, origin_node_id, event_id, result, reason_code, conflict_id,"
            " result_revision, decided_at, source_topic, source_partition, source_position"
            " FROM receipt WHERE origin_node_id = %(node)s AND seq > %(after)s"
            " AND (%(result)s::text IS NULL OR result = %(result)s)"
            " ORDER BY seq LIMIT %(limit)s",
            {"node": node_id, "after": after_seq, "limit": limit, "result": result}).fetchall()
    return [ReceiptRow(*row) for row in rows]

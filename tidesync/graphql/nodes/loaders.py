"""Node overview rows (the node_overview view), read in pages or by id for DataLoaders."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class NodeRow:
    node_id: str
    status: str
    registered_at: dt.datetime | None
    revoked_at: dt.datetime | None
    client_version: str | None
    last_heartbeat_at: dt.datetime | None
    health: object
    backlog_events: int | None
    backlog_bytes: int | None
    throughput: object
    heartbeat_sent_at: dt.datetime | None
    protocol_version: str | None
    active_config_version: str | None
    health_state: str | None
    version: int


_COLUMNS = ("node_id, status, registered_at, revoked_at, client_version, last_heartbeat_at,"
            " health, backlog_events, backlog_bytes, throughput, heartbeat_sent_at,"
            " protocol_version, active_config_version, health_state, version")


def fetch_nodes(pool: Pool, status: str | None, after: str | None, limit: int) -> list[NodeRow]:
    """Up to `limit` nodes after the node id `after`, in node id order."""
    with pool.connection() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM node_overview"  # noqa: S608
            " WHERE (%(status)s::text IS NULL OR status = %(status)s)"
            " AND (%(after)s::text IS NULL OR node_id > %(after)s)"
            " ORDER BY node_id LIMIT %(limit)s",
            {"status": status, "after": after, "limit": limit}).fetchall()
    return [NodeRow(*row) for row in rows]


def fetch_nodes_by_id(pool: Pool, node_ids: Sequence[str]) -> list[NodeRow | None]:
    with pool.connection() as conn:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM node_overview"  # noqa: S608
                            " WHERE node_id = ANY(%s)", (list(node_ids),)).fetchall()
    found = {row[0]: NodeRow(*row) for row in rows}
    return [found.get(node_id) for node_id in node_ids]

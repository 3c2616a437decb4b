"""Backlog rows (the backlog view) by node, direction, rule, priority and state."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class BacklogRow:
    node_id: str
    direction: str
    rule_id: str
    priority: str
    state: str
    events: int
    bytes: int
    oldest_business_at: dt.datetime | None
    newest_business_at: dt.datetime | None
    oldest_captured_at: dt.datetime | None
    newest_captured_at: dt.datetime | None
    estimated_compressed_bytes: int | None
    reported_at: dt.datetime | None

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        return (self.node_id, self.direction, self.rule_id, self.priority, self.state)


@dataclass(frozen=True)
class BacklogFilter:
    node_id: str | None = None
    direction: str | None = None
    rule_id: str | None = None
    state: str | None = None


_COLUMNS = ("node_id, direction, rule_id, priority, state, events, bytes, oldest_business_at,"
            " newest_business_at, oldest_captured_at, newest_captured_at,"
            " estimated_compressed_bytes, reported_at")


def fetch_backlogs(pool: Pool, where: BacklogFilter, after: Sequence[object] | None,
                   limit: int) -> list[BacklogRow]:
    """Up to `limit` rows after the key `after`, in key order."""
    params: dict[str, object] = {
        "node": where.node_id, "direction": where.direction, "rule": where.rule_id,
        "state": where.state, "limit": limit, "has_after": after is not None,
    }
    names = ("a_node", "a_direction", "a_rule", "a_priority", "a_state")
    params.update(zip(names, [str(part) for part in after] if after else [None] * 5,
                      strict=True))
    with pool.connection() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM backlog"  # noqa: S608
            " WHERE (%(node)s::text IS NULL OR node_id = %(node)s)"
            " AND (%(direction)s::text IS NULL OR direction = %(direction)s)"
            " AND (%(rule)s::text IS NULL OR rule_id = %(rule)s)"
            " AND (%(state)s::text IS NULL OR state = %(state)s)"
            " AND (NOT %(has_after)s OR (node_id, direction, rule_id, priority, state) >"
            " (%(a_node)s::text, %(a_direction)s::text, %(a_rule)s::text, %(a_priority)s::text,"
            " %(a_state)s::text))"
            " ORDER BY node_id, direction, rule_id, priority, state LIMIT %(limit)s",
            params).fetchall()
    return [BacklogRow(*row) for row in rows]


def fetch_backlogs_by_node(pool: Pool, node_ids: Sequence[str]) -> list[list[BacklogRow]]:
    with pool.connection() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM backlog WHERE node_id = ANY(%s)"  # noqa: S608
            " ORDER BY node_id, direction, rule_id, priority, state",
            (list(node_ids),)).fetchall()
    by_node: dict[str, list[BacklogRow]] = {node_id: [] for node_id in node_ids}
    for row in rows:
        by_node[row[0]].append(BacklogRow(*row))
    return [by_node[node_id] for node_id in node_ids]

"""Conflict rows (the conflict_center view) in pages, and ConflictCase aggregates by id."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from eventsourcing.application import AggregateNotFoundError
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from tidesync.apps.conflict_cases import ConflictCasesApplication
from tidesync.domain.conflict_case import ConflictCase

Pool = ConnectionPool[psycopg.Connection[TupleRow]]


@dataclass(frozen=True)
class ConflictRow:
    conflict_id: uuid.UUID
    rule_id: str
    key_digest: str
    database: str
    table_name: str
    state: str
    opened_at: dt.datetime
    updated_at: dt.datetime
    evidence_count: int
    node_ids: list[str]
    sla_due_at: dt.datetime
    summary: object
    version: int
    rule_version: int | None


@dataclass(frozen=True)
class ConflictFilter:
    node_id: str | None = None
    rule_id: str | None = None
    states: tuple[str, ...] = ()
    opened_before: dt.datetime | None = None
    opened_after: dt.datetime | None = None
    database: str | None = None
    table: str | None = None


_COLUMNS = ("conflict_id, rule_id, key_digest, database, table_name, state, opened_at,"
            " updated_at, evidence_count, node_ids, sla_due_at, summary, version, rule_version")


def fetch_conflicts(pool: Pool, where: ConflictFilter, after: Sequence[object] | None,
                    limit: int) -> list[ConflictRow]:
    """Up to `limit` conflicts after the (opened_at, conflict_id) key, oldest first."""
    after_at, after_id = (str(after[0]), str(after[1])) if after else (None, None)
    with pool.connection() as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM conflict_center"  # noqa: S608
            " WHERE (%(node)s::text IS NULL OR node_ids @> ARRAY[%(node)s::text])"
            " AND (%(rule)s::text IS NULL OR rule_id = %(rule)s)"
            " AND (cardinality(%(states)s::text[]) = 0 OR state = ANY(%(states)s::text[]))"
            " AND (%(before)s::timestamptz IS NULL OR opened_at <= %(before)s)"
            " AND (%(after_time)s::timestamptz IS NULL OR opened_at >= %(after_time)s)"
            " AND (%(database)s::text IS NULL OR database = %(database)s)"
            " AND (%(table)s::text IS NULL OR table_name = %(table)s)"
            " AND (%(after_at)s::timestamptz IS NULL OR (opened_at, conflict_id) >"
            " (%(after_at)s::timestamptz, %(after_id)s::uuid))"
            " ORDER BY opened_at, conflict_id LIMIT %(limit)s",
            {"node": where.node_id, "rule": where.rule_id, "states": list(where.states),
             "before": where.opened_before, "after_time": where.opened_after,
             "database": where.database, "table": where.table, "after_at": after_at,
             "after_id": after_id, "limit": limit}).fetchall()
    return [ConflictRow(*row) for row in rows]


def load_cases(app: ConflictCasesApplication,
               conflict_ids: Sequence[uuid.UUID]) -> list[ConflictCase | None]:
    cases: list[ConflictCase | None] = []
    for conflict_id in conflict_ids:
        try:
            cases.append(app.get_case(conflict_id))
        except AggregateNotFoundError:
            cases.append(None)
    return cases

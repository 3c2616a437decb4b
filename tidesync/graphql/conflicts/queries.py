"""Conflict queries: the conflict center (filtered by node, rule, state, table and age) and
one case with its evidence side by side."""

from __future__ import annotations

import datetime as dt
import uuid

import strawberry

from tidesync.domain.conflict_case import ConflictState
from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.conflicts.loaders import ConflictFilter, fetch_conflicts
from tidesync.graphql.conflicts.types import ConflictDetail, ConflictSummary
from tidesync.graphql.context import Info
from tidesync.graphql.errors import BadUserInput
from tidesync.graphql.permissions import CanView, allow

MAX_AGE_SECONDS = 100 * 366 * 24 * 3600


@strawberry.input(description="Which conflicts to list; every given condition must hold.")
class ConflictFilterInput:
    node_id: str | None = None
    rule_id: str | None = None
    states: list[ConflictState] | None = None
    database: str | None = None
    table: str | None = None
    older_than_seconds: int | None = strawberry.field(
        default=None, description="Opened at least this many seconds ago.")
    newer_than_seconds: int | None = strawberry.field(
        default=None, description="Opened at most this many seconds ago.")

    def to_filter(self, now: dt.datetime) -> ConflictFilter:
        return ConflictFilter(
            node_id=self.node_id, rule_id=self.rule_id,
            states=tuple(state.value for state in self.states or ()),
            opened_before=_ago(now, self.older_than_seconds, "olderThanSeconds"),
            opened_after=_ago(now, self.newer_than_seconds, "newerThanSeconds"),
            database=self.database, table=self.table,
        )


def _ago(now: dt.datetime, seconds: int | None, name: str) -> dt.datetime | None:
    if seconds is None:
        return None
    if not 0 <= seconds <= MAX_AGE_SECONDS:
        raise BadUserInput(f"{name} must be 0..{MAX_AGE_SECONDS}")
    return now - dt.timedelta(seconds=seconds)


def parse_conflict_id(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


@strawberry.type
class ConflictQueries:
    @field(extensions=allow(CanView), description="The conflict center, oldest first.")
    async def conflicts(self, info: Info, filter: ConflictFilterInput | None = None,
                        first: int | None = None, after: str | None = None,
                        wait_for: str | None = None) -> Page[ConflictSummary]:
        context = info.context
        size = context.console.limits.page_size(first)
        where = (filter or ConflictFilterInput()).to_filter(context.console.clock())
        key = decode_cursor(after, 2)
        if key is not None and (parse_conflict_id(str(key[1])) is None or not _is_time(key[0])):
            raise BadUserInput("not a cursor from this list")
        rows = await context.read(fetch_conflicts, context.console.pool, where, key, size + 1,
                                  wait_for=wait_for)
        digests = context.console.digests()
        return page_of(rows, size, lambda row: [row.opened_at, str(row.conflict_id)],
                       lambda row: ConflictSummary.from_row(row, digests))

    @field(extensions=allow(CanView),
           description="One conflict case from its stream, evidence side by side.")
    async def conflict(self, info: Info, id: strawberry.ID,
                       wait_for: str | None = None) -> ConflictDetail | None:
        conflict_id = parse_conflict_id(str(id))
        if conflict_id is None:
            return None
        await info.context.catch_up(wait_for)
        case = await info.context.loaders.conflict_case.load(conflict_id)
        if case is None:
            return None
        console = info.context.console
        return ConflictDetail.from_case(case, console.sensitive_column, console.digests())


def _is_time(raw: object) -> bool:
    try:
        dt.datetime.fromisoformat(str(raw))
    except ValueError:
        return False
    return True

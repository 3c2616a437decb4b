"""Backlog queries: pages of backlog rows, filtered by node, direction, rule and state."""

from __future__ import annotations

import strawberry

from tidesync.graphql.backlogs.loaders import BacklogFilter, fetch_backlogs
from tidesync.graphql.backlogs.types import Backlog
from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanView, allow


@strawberry.type
class BacklogQueries:
    @field(extensions=allow(CanView),
                      description="Backlog rows in (node, direction, rule, priority, state) "
                                  "order.")
    async def backlogs(self, info: Info, node_id: str | None = None,
                       direction: str | None = None, rule_id: str | None = None,
                       state: str | None = None, first: int | None = None,
                       after: str | None = None, wait_for: str | None = None) -> Page[Backlog]:
        context = info.context
        size = context.console.limits.page_size(first)
        where = BacklogFilter(node_id, direction, rule_id, state)
        rows = await context.read(fetch_backlogs, context.console.pool, where,
                                  decode_cursor(after, 5), size + 1, wait_for=wait_for)
        return page_of(rows, size, lambda row: row.key, Backlog.from_row)

"""Sync state queries: each node's snapshot and catch-up state per rule and table."""

from __future__ import annotations

import strawberry

from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanView, allow
from tidesync.graphql.sync_states.loaders import SyncStateFilter, fetch_sync_states
from tidesync.graphql.sync_states.types import RuleSyncState


@strawberry.type
class SyncStateQueries:
    @field(extensions=allow(CanView),
           description="The snapshot phase, progress and catch-up lag of each node and rule "
                       "(or table), as the nodes' latest heartbeats reported them, in (node, "
                       "subject) order.")
    async def rule_sync_states(self, info: Info, node_id: str | None = None,
                               rule_id: str | None = None, table: str | None = None,
                               first: int | None = None,
                               after: str | None = None) -> Page[RuleSyncState]:
        context = info.context
        size = context.console.limits.page_size(first)
        rows = await context.read(fetch_sync_states, context.console.pool,
                                  SyncStateFilter(node_id, rule_id, table),
                                  decode_cursor(after, 2), size + 1)
        return page_of(rows, size, lambda row: row.key, RuleSyncState.from_row)

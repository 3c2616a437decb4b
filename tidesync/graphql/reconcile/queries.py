"""Reconciliation queries: the consistency sentinel, by node and subject."""

from __future__ import annotations

import strawberry

from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanView, allow
from tidesync.graphql.reconcile.loaders import fetch_sentinel
from tidesync.graphql.reconcile.types import ReconcileResult


@strawberry.type
class ReconcileQueries:
    @field(extensions=allow(CanView),
           description="The last reconciliation of each node and table or rule, in (node, "
                       "subject) order.")
    async def reconcile_results(self, info: Info, node_id: str | None = None,
                                subject: str | None = None, first: int | None = None,
                                after: str | None = None) -> Page[ReconcileResult]:
        context = info.context
        size = context.console.limits.page_size(first)
        rows = await context.read(fetch_sentinel, context.console.pool, node_id, subject,
                                  decode_cursor(after, 2), size + 1)
        return page_of(rows, size, lambda row: row.key, ReconcileResult.from_row)

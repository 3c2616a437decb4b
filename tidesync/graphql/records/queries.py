"""Record head queries: pages of current record versions, by rule, table, digest or origin."""

from __future__ import annotations

import strawberry

from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.context import Info
from tidesync.graphql.permissions import CanView, allow
from tidesync.graphql.records.loaders import RecordHeadFilter, fetch_record_heads
from tidesync.graphql.records.types import RecordHead


@strawberry.type
class RecordQueries:
    @field(extensions=allow(CanView), description="Record heads in (rule, key digest) order.")
    async def record_heads(self, info: Info, rule_id: str | None = None,
                           database: str | None = None, table: str | None = None,
                           key_digest: str | None = None, origin_node_id: str | None = None,
                           first: int | None = None, after: str | None = None,
                           wait_for: str | None = None) -> Page[RecordHead]:
        context = info.context
        size = context.console.limits.page_size(first)
        where = RecordHeadFilter(rule_id, database, table, key_digest, origin_node_id)
        rows = await context.read(fetch_record_heads, context.console.pool, where,
                                  decode_cursor(after, 2), size + 1, wait_for=wait_for)
        return page_of(rows, size, lambda row: [row.rule_id, row.key_digest],
                       RecordHead.from_row)

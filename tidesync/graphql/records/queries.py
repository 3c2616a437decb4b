"""Record head queries: pages of current record versions, by rule, table, digest or origin."""

from __future__ import annotations

import strawberry

from tidesync.graphql.common import Page, PageInfo, field
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
        digests = context.console.digests()
        # Shown key digests are keyed: the filter matches them in SQL, and the cursor (which
        # holds the stored, unkeyed digest) is sealed.
        where = RecordHeadFilter(rule_id, database, table,
                                 None if key_digest is None else key_digest.lower(),
                                 origin_node_id, digests.record_key_pads())
        rows = await context.read(fetch_record_heads, context.console.pool, where,
                                  digests.open_cursor(after, 2), size + 1, wait_for=wait_for)
        shown = rows[:size]
        end = digests.seal_cursor([shown[-1].rule_id, shown[-1].key_digest]) if shown else None
        return Page(items=[RecordHead.from_row(row, digests) for row in shown],
                    page_info=PageInfo(end_cursor=end, has_next_page=len(rows) > size))

"""Receipt queries: one node's terminal results in pull order, paged by cursor."""

from __future__ import annotations

import strawberry

from tidesync.domain.apply_job import EventResult
from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.context import Info
from tidesync.graphql.errors import BadUserInput
from tidesync.graphql.permissions import CanView, allow
from tidesync.graphql.receipts.loaders import fetch_receipts
from tidesync.graphql.receipts.types import Receipt

strawberry.enum(EventResult, name="EventResult")


@strawberry.type
class ReceiptQueries:
    @field(extensions=allow(CanView), description="One node's receipts in the order its ship "
                                                  "pulls them.")
    async def receipts(self, info: Info, node_id: str, result: EventResult | None = None,
                       first: int | None = None, after: str | None = None,
                       wait_for: str | None = None) -> Page[Receipt]:
        context = info.context
        size = context.console.limits.page_size(first)
        key = decode_cursor(after, 1)
        after_seq = 0 if key is None else key[0]
        if not isinstance(after_seq, int) or isinstance(after_seq, bool):
            raise BadUserInput("not a cursor from this list")
        rows = await context.read(fetch_receipts, context.console.pool, node_id, after_seq,
                                  size + 1, None if result is None else result.value,
                                  wait_for=wait_for)
        return page_of(rows, size, lambda row: [row.seq], Receipt.from_row)

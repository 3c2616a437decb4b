"""Node queries: the node overview, one page or one node."""

from __future__ import annotations

import strawberry

from tidesync.domain.node import NodeStatus
from tidesync.graphql.common import Page, decode_cursor, field, page_of
from tidesync.graphql.context import Info
from tidesync.graphql.nodes.loaders import fetch_nodes
from tidesync.graphql.nodes.types import Node
from tidesync.graphql.permissions import CanView, allow

strawberry.enum(NodeStatus, name="NodeStatus")


@strawberry.type
class NodeQueries:
    @field(extensions=allow(CanView), description="Nodes in node id order.")
    async def nodes(self, info: Info, status: NodeStatus | None = None,
                    first: int | None = None, after: str | None = None,
                    wait_for: str | None = None) -> Page[Node]:
        context = info.context
        size = context.console.limits.page_size(first)
        key = decode_cursor(after, 1)
        rows = await context.read(fetch_nodes, context.console.pool,
                                  None if status is None else status.value,
                                  None if key is None else str(key[0]), size + 1,
                                  wait_for=wait_for)
        return page_of(rows, size, lambda row: [row.node_id], Node.from_row)

    @field(extensions=allow(CanView), description="One node, if it is known.")
    async def node(self, info: Info, node_id: str, wait_for: str | None = None) -> Node | None:
        await info.context.catch_up(wait_for)
        row = await info.context.loaders.node.load(node_id)
        return None if row is None else Node.from_row(row)

"""The Backlog type: queued events and bytes of one node, direction, rule, priority, state."""

from __future__ import annotations

import datetime as dt

import strawberry

from tidesync.graphql.backlogs.loaders import BacklogRow
from tidesync.graphql.common import Long, long_or_none


@strawberry.type(description="Events and bytes waiting, by node, direction (UPLINK: on the "
                             "shore, by apply state; UPLINK_SHIP / DOWNLINK_SHIP: the node's "
                             "own queue as it last reported), rule, priority and state.")
class Backlog:
    node_id: str
    direction: str
    rule_id: str
    priority: str
    state: str
    events: Long
    bytes: Long
    oldest_business_at: dt.datetime | None
    newest_business_at: dt.datetime | None
    oldest_captured_at: dt.datetime | None
    newest_captured_at: dt.datetime | None
    estimated_compressed_bytes: Long | None
    reported_at: dt.datetime | None

    @classmethod
    def from_row(cls, row: BacklogRow) -> Backlog:
        return cls(
            node_id=row.node_id, direction=row.direction, rule_id=row.rule_id,
            priority=row.priority, state=row.state, events=Long(row.events), bytes=Long(row.bytes),
            oldest_business_at=row.oldest_business_at, newest_business_at=row.newest_business_at,
            oldest_captured_at=row.oldest_captured_at, newest_captured_at=row.newest_captured_at,
            estimated_compressed_bytes=long_or_none(row.estimated_compressed_bytes),
            reported_at=row.reported_at,
        )

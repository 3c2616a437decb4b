"""The Receipt type: one uplink event's terminal result, as its ship pulls it."""

from __future__ import annotations

import datetime as dt
import uuid

import strawberry

from tidesync.graphql.common import Long
from tidesync.graphql.receipts.loaders import ReceiptRow


@strawberry.type(description="A terminal result of an uplink event (never RECEIVED).")
class Receipt:
    seq: Long
    origin_node_id: str
    event_id: strawberry.ID
    result: str
    reason_code: str | None
    conflict_id: strawberry.ID | None
    result_revision: str | None
    decided_at: dt.datetime
    source_topic: str
    source_partition: int
    source_position: Long

    @classmethod
    def from_row(cls, row: ReceiptRow) -> Receipt:
        revision = (None if row.result_revision is None
                    else str(uuid.UUID(bytes=bytes(row.result_revision))))
        return cls(
            seq=Long(row.seq), origin_node_id=row.origin_node_id,
            event_id=strawberry.ID(str(row.event_id)), result=row.result,
            reason_code=row.reason_code,
            conflict_id=None if row.conflict_id is None else strawberry.ID(str(row.conflict_id)),
            result_revision=revision, decided_at=row.decided_at, source_topic=row.source_topic,
            source_partition=row.source_partition, source_position=Long(row.source_position),
        )

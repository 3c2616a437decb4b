"""The ReconcileResult type: the last reconciliation of one node and table or rule."""

from __future__ import annotations

import datetime as dt

import strawberry

from tidesync.graphql.common import Long, field
from tidesync.graphql.context import Info
from tidesync.graphql.reconcile.loaders import SentinelRow
from tidesync.graphql.reconcile.permissions import CanSeeDifferingKeys


@strawberry.type(description="The last reconciliation over the link of one node and subject "
                             "(`rule:ID` or `table:DB.TABLE`): the consistency sentinel.")
class ReconcileResult:
    exchange_id: str
    node_id: str
    subject: str
    state: str = strawberry.field(description="RUNNING, EQUAL, DIFFERENT, FAILED or TIMED_OUT"
                                              " (the ship did not answer in time).")
    differing_count: int | None
    rows_compared: Long
    messages: int
    link_bytes: Long = strawberry.field(description="Compressed bytes, both directions.")
    started_at: dt.datetime
    ended_at: dt.datetime | None
    seconds: float | None
    error: str
    repaired_at: dt.datetime | None
    keys: strawberry.Private[list[str]]

    @field(description="The differing keys, each a JSON array of its type-tagged values; "
                       "null when not shown to your role (record keys are business data).")
    def differing_keys(self, info: Info) -> list[str] | None:
        # Checked here, not by a hiding extension: a hidden list would read as an empty one.
        if not CanSeeDifferingKeys().has_permission(self, info):
            return None
        return self.keys

    @classmethod
    def from_row(cls, row: SentinelRow) -> ReconcileResult:
        seconds = (None if row.ended_at is None
                   else max(0.0, (row.ended_at - row.started_at).total_seconds()))
        return cls(exchange_id=str(row.exchange_id), node_id=row.node_id, subject=row.subject,
                   state=row.state, differing_count=row.differing_count,
                   rows_compared=Long(row.rows_compared), messages=row.messages,
                   link_bytes=Long(row.link_bytes), started_at=row.started_at,
                   ended_at=row.ended_at, seconds=seconds, error=row.error,
                   repaired_at=row.repaired_at, keys=row.keys_text)

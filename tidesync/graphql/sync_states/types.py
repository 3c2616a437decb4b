"""The RuleSyncState type: where one node's snapshot of one rule (or table) stands."""

from __future__ import annotations

import datetime as dt
import enum

import strawberry

from tidesync.graphql.common import Long, long_or_none
from tidesync.graphql.sync_states.loaders import SyncStateRow


@strawberry.enum(description="Where a rule's (or a table's) snapshot stands on a node.")
class SyncPhase(enum.Enum):
    NONE = "NONE"
    QUEUED = "QUEUED"
    SNAPSHOTTING = "SNAPSHOTTING"
    CATCHING_UP = "CATCHING_UP"
    IN_SYNC = "IN_SYNC"
    FAILED = "FAILED"


@strawberry.type(description="The snapshot and catch-up state of one node and subject (`rule:ID`"
                             " for an active rule, `table:DB.TABLE` for a snapshot no rule "
                             "asked for), as the node's latest heartbeat reported it.")
class RuleSyncState:
    node_id: str
    subject: str
    rule_id: str | None = strawberry.field(description="Null: a snapshot no rule asked for.")
    rule_version: Long = strawberry.field(description="The rule version the state is of; 0 "
                                                      "without a rule.")
    table: str = strawberry.field(description="DB.TABLE the rule or snapshot reads.")
    phase: SyncPhase = strawberry.field(
        description="NONE (the active version asked for no snapshot), QUEUED, SNAPSHOTTING, "
                    "CATCHING_UP (every row on the ship's queue, `lagRecords` not yet answered "
                    "by the shore), IN_SYNC or FAILED.")
    snapshot_id: Long | None = strawberry.field(description="The ship's snapshot request.")
    rows_sent: Long
    rows_total: Long | None = strawberry.field(description="Rows (or keys) to send, counted "
                                                           "when reading began.")
    progress: float | None = strawberry.field(description="rowsSent / rowsTotal, 0 to 1.")
    started_at: dt.datetime | None = strawberry.field(description="When reading began (the "
                                                                  "node's clock).")
    finished_at: dt.datetime | None = strawberry.field(
        description="When the last row was on the ship's queue, or the snapshot failed.")
    lag_records: Long = strawberry.field(description="Queue records up to the snapshot's last "
                                                     "one without an answer from the shore.")
    sent_at: dt.datetime = strawberry.field(description="The heartbeat's time (node's clock).")
    reported_at: dt.datetime = strawberry.field(description="When the shore received it.")
    in_sync_since: dt.datetime | None = strawberry.field(
        description="While IN_SYNC: the time of the first heartbeat that reported this snapshot"
                    " IN_SYNC (the node's clock); null in every other phase.")

    @classmethod
    def from_row(cls, row: SyncStateRow) -> RuleSyncState:
        progress = (None if not row.rows_total
                    else min(1.0, row.rows_sent / row.rows_total))
        return cls(node_id=row.node_id, subject=row.subject, rule_id=row.rule_id,
                   rule_version=Long(row.rule_version), table=row.table_name,
                   phase=SyncPhase(row.phase), snapshot_id=long_or_none(row.snapshot_id),
                   rows_sent=Long(row.rows_sent), rows_total=long_or_none(row.rows_total),
                   progress=progress, started_at=row.started_at, finished_at=row.finished_at,
                   lag_records=Long(row.lag_records), sent_at=row.sent_at,
                   reported_at=row.reported_at, in_sync_since=row.in_sync_since)

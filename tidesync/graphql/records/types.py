"""The RecordHead type: the shore's current version of one record. Its key holds business
values, so only roles that see evidence values see it; everyone sees the digest."""

from __future__ import annotations

import datetime as dt

import strawberry

from tidesync.graphql.common import field
from tidesync.graphql.context import Info
from tidesync.graphql.digests import Digests
from tidesync.graphql.permissions import CanReadEvidenceValues, allow
from tidesync.graphql.records.loaders import RecordHeadRow


@strawberry.type(description="The shore's current version of a record (from applied results).")
class RecordHead:
    rule_id: str
    key_digest: str
    database: str
    table: str
    revision: str | None
    origin_node_id: str
    last_event_id: strawberry.ID
    tombstone: bool
    updated_at: dt.datetime
    canonical_key: strawberry.Private[str]

    @field(extensions=allow(CanReadEvidenceValues, hide=True),
           description="The record key (canonical text); null for roles that may not see key "
                       "values. Showing keys is recorded as an operator action.")
    async def record_key(self, info: Info) -> str | None:
        await info.context.audit_read("read_record_keys", "record_head")
        return self.canonical_key

    @classmethod
    def from_row(cls, row: RecordHeadRow, digests: Digests) -> RecordHead:
        return cls(
            rule_id=row.rule_id, key_digest=digests.record_key(row.key_digest),
            database=row.database,
            table=row.table_name, revision=None if row.revision is None else str(row.revision),
            origin_node_id=row.origin_node_id, last_event_id=strawberry.ID(str(row.last_event_id)),
            tombstone=row.tombstone, updated_at=row.updated_at, canonical_key=row.record_key,
        )

"""Change events for the target applier tests: small builders with stable ids and revisions."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Mapping

from tidesync.domain.change_event import (
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.domain.values import Value

SHIP = "ship-0042"
SHORE = "shore-hq"
CAPTURED_AT = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
_offsets = itertools.count(1)


def revision() -> Revision:
    return Revision(uuid.uuid4().bytes)


def change(
    operation: Operation, database: str, table: str, key: Mapping[str, Value], *,
    before: Mapping[str, Value] | None = None, after: Mapping[str, Value] | None = None,
    base: Revision | None = None, result: Revision | None = None, origin: str = SHIP,
) -> ChangeEvent:
    """One event with a fresh source offset; `result` defaults to a new revision."""
    record = RecordKey.of(database, table, key)
    coordinates = SourceCoordinates(origin, 0, f"cdc.{database}.{table}", 0, next(_offsets))
    event_id = event_id_for(coordinates, record, operation)
    if result is None:
        result = tombstone_revision(event_id) if operation is Operation.DELETE else revision()
    return ChangeEvent(
        event_id=event_id, origin_node_id=origin, source_connector_id=f"{origin}-mysql",
        source_topic=coordinates.topic, source_partition=0, source_position=coordinates.offset,
        record=record, operation=operation, captured_at=CAPTURED_AT,
        before=before, after=after, base_revision=base, result_revision=result,
    )


def insert(database: str, table: str, row: Mapping[str, Value], key: str = "id",
           **kw: object) -> ChangeEvent:
    return change(Operation.INSERT, database, table, {key: row[key]}, after=row,
                  **kw)  # type: ignore[arg-type]


def update(database: str, table: str, before: Mapping[str, Value],
           changes: Mapping[str, Value], base: Revision | None, key: str = "id",
           **kw: object) -> ChangeEvent:
    after = {**before, **changes}
    return change(Operation.UPDATE, database, table, {key: before[key]}, before=before,
                  after=after, base=base, **kw)  # type: ignore[arg-type]


def delete(database: str, table: str, before: Mapping[str, Value], base: Revision | None,
           key: str = "id", **kw: object) -> ChangeEvent:
    return change(Operation.DELETE, database, table, {key: before[key]}, before=before,
                  base=base, **kw)  # type: ignore[arg-type]

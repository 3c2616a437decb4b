"""ChangeEvents as `sync.proto` messages: images without their key columns, an UPDATE as its
changed columns, revisions referenced rather than repeated; decoded with the same checks.
"""

from __future__ import annotations

import uuid
from types import MappingProxyType

from tidesync.domain.change_event import ChangeEvent, Operation, RecordKey, Revision
from tidesync.domain.values import Row, Value, canonical_value
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.columns import (
    CONVERSION_ERRORS,
    EventRevisions,
    NameTable,
    columns_from_wire,
    columns_to_wire,
    epoch_micros,
    moment_from_micros,
    record_key_from_wire,
    record_key_to_wire,
)
from tidesync.wire.protocol import PROTOCOL_VERSION, MalformedPayload, check_schema_version

# ----------------------------------------------------------------------------- revisions


def _revision_bytes(revision: Revision | None) -> bytes:
    return b"" if revision is None else revision.value


def _revision_from(raw: bytes, what: str) -> Revision | None:
    if not raw:
        return None
    if len(raw) != 16:
        raise MalformedPayload(f"{what} must be 16 bytes")
    return Revision(raw)


# ----------------------------------------------------------------------------- events


def event_to_wire(
    event: ChangeEvent, names: NameTable, *, include_before: bool = True,
    batch_version: str = PROTOCOL_VERSION, out: pb.ChangeEvent | None = None,
) -> pb.ChangeEvent:
    """One ChangeEvent for an UploadBatch whose name table is `names` (filled into `out`,
    a fresh element of the batch, when given).

    Images leave out the key columns; an UPDATE sends only its changed columns, and their
    before values only with `include_before` (a DELETE likewise sends its before image only
    with `include_before`). Raises ValueError for an image that disagrees with the key.
    """
    wire = pb.ChangeEvent() if out is None else out
    wire.event_id = event.event_id.bytes
    wire.origin_node_ref = names.ref(event.origin_node_id)
    wire.source_connector_ref = names.ref(event.source_connector_id)
    wire.source_topic_ref = names.ref(event.source_topic)
    wire.source_partition = event.source_partition
    wire.source_position = event.source_position
    wire.operation = WIRE_OPERATIONS[event.operation]
    wire.captured_at_micros = epoch_micros(event.captured_at)
    wire.base_revision = _revision_bytes(event.base_revision)
    wire.result_revision = _revision_bytes(event.result_revision)
    wire.trace_id = event.trace_id
    wire.replay_epoch = event.replay_epoch
    if event.schema_version != batch_version:
        wire.schema_version = event.schema_version
    record_key_to_wire(event.record, names, wire.record)
    _optional_fields_to_wire(event, names, wire)
    _images_to_wire(event, names, wire, include_before)
    return wire


def _optional_fields_to_wire(event: ChangeEvent, names: NameTable, wire: pb.ChangeEvent) -> None:
    if event.source_sequence is not None:
        wire.source_sequence = event.source_sequence
    if event.rule_id is not None:
        wire.rule_id_ref = names.ref(event.rule_id)
    if event.rule_version is not None:
        wire.rule_version = event.rule_version
    if event.transaction_id is not None:
        wire.transaction_id = event.transaction_id
    if event.transaction_order is not None:
        wire.transaction_order = event.transaction_order
    if event.business_occurred_at is not None:
        wire.business_occurred_at_micros = epoch_micros(event.business_occurred_at)
    columns_to_wire(event.source_details.items(), names, wire.source_details)


def _images_to_wire(
    event: ChangeEvent, names: NameTable, wire: pb.ChangeEvent, include_before: bool,
) -> None:
    revisions = EventRevisions(event.base_revision, event.result_revision)
    key_names = key_names_checked(event)
    before, after = wire_images(event, key_names)
    columns_to_wire(after, names, wire.after, revisions.after_references())
    if before and not include_before:
        wire.before_omitted = True
    elif before:
        columns_to_wire(before, names, wire.before, revisions.before_references())


def wire_images(
    event: ChangeEvent, key_names: frozenset[str],
) -> tuple[list[tuple[str, Value]], list[tuple[str, Value]]]:
    """(before, after) pairs to send: no key columns; an UPDATE only its changed columns."""
    before, after = event.before or {}, event.after or {}
    if event.operation is Operation.UPDATE:
        changed = [name for name in event.changed_columns() if name not in key_names]
        return ([(n, before[n]) for n in changed if n in before],
                [(n, after[n]) for n in changed])
    return ([(n, v) for n, v in before.items() if n not in key_names],
            [(n, v) for n, v in after.items() if n not in key_names])


def key_names_checked(event: ChangeEvent) -> frozenset[str]:
    # The receiver rebuilds images from the key, so each image must agree with the key.
    if event.operation in (Operation.INSERT, Operation.SNAPSHOT) and event.before is not None:
        raise ValueError(f"{event.operation} events carry no before image on the wire")
    for image in (event.before, event.after):
        for name, value in event.record.primary_key:
            if image is not None and (name not in image or not _same_key_value(image[name],
                                                                               value)):
                raise ValueError("an image disagrees with the record key")
    return frozenset(name for name, _ in event.record.primary_key)


_PLAIN_TYPES = (int, str, bytes)
"""Types whose canonical values are equal exactly when the values of one type are."""


def _same_key_value(a: Value, b: Value) -> bool:
    """canonical_value(a) == canonical_value(b), without building them for plain keys."""
    if type(a) is type(b) and type(a) in _PLAIN_TYPES:
        return a == b
    return canonical_value(a) == canonical_value(b)


def event_from_wire(
    wire: pb.ChangeEvent, names: NameTable, *, batch_version: str = PROTOCOL_VERSION,
) -> ChangeEvent:
    """The ChangeEvent a wire event describes (an UPDATE keeps only key + changed columns)."""
    schema_version = wire.schema_version or batch_version
    check_schema_version(schema_version)
    operation = _operation_from_wire(wire.operation)
    record = record_key_from_wire(wire.record, names)
    revisions = EventRevisions(
        _revision_from(wire.base_revision, "base_revision"),
        _revision_from(wire.result_revision, "result_revision"),
    )
    before, after = _images_from_wire(wire, operation, record, names, revisions)
    has = wire.HasField  # (looked up once: this runs for every event)
    try:  # (as `with _malformed_on_error`, which costs more: this runs for every event)
        return ChangeEvent(
            event_id=uuid_from_wire(wire.event_id, "event_id"),
            origin_node_id=names.name(wire.origin_node_ref),
            source_connector_id=names.name(wire.source_connector_ref),
            source_topic=names.name(wire.source_topic_ref),
            source_partition=wire.source_partition,
            source_position=wire.source_position,
            record=record, operation=operation,
            captured_at=moment_from_micros(wire.captured_at_micros),
            before=before, after=after,
            base_revision=revisions.base, result_revision=revisions.result,
            trace_id=wire.trace_id, replay_epoch=wire.replay_epoch,
            schema_version=schema_version,
            source_details=MappingProxyType(dict(columns_from_wire(wire.source_details, names))),
            source_sequence=wire.source_sequence if has("source_sequence") else None,
            rule_id=names.name(wire.rule_id_ref) if has("rule_id_ref") else None,
            rule_version=wire.rule_version if has("rule_version") else None,
            transaction_id=wire.transaction_id if has("transaction_id") else None,
            transaction_order=wire.transaction_order if has("transaction_order") else None,
            business_occurred_at=moment_from_micros(wire.business_occurred_at_micros)
            if has("business_occurred_at_micros") else None,
        )
    except CONVERSION_ERRORS as error:
        raise MalformedPayload("inconsistent change event") from error


def _images_from_wire(
    wire: pb.ChangeEvent, operation: Operation, record: RecordKey, names: NameTable,
    revisions: EventRevisions,
) -> tuple[Row | None, Row | None]:
    before = columns_from_wire(wire.before, names, revisions)
    after = columns_from_wire(wire.after, names, revisions)
    if operation in (Operation.INSERT, Operation.SNAPSHOT):
        if before or wire.before_omitted:
            raise MalformedPayload(f"{operation} carries no before image")
        return None, with_key(record, after)
    if operation is Operation.DELETE and after:
        raise MalformedPayload("DELETE carries no after image")
    return (with_key(record, before),
            None if operation is Operation.DELETE else with_key(record, after))


def with_key(record: RecordKey, image: list[tuple[str, Value]]) -> Row:
    """An image with the key columns it left out, handed over frozen (see `frozen_row`:
    nothing else holds the dict)."""
    row = dict(record.primary_key)
    row.update(image)
    # The image's names are distinct, so a shorter row means it named a key column.
    if len(row) != len(record.primary_key) + len(image):
        raise MalformedPayload("an image repeats a key column")
    return MappingProxyType(row)


WIRE_OPERATIONS: dict[Operation, pb.Operation] = {
    Operation.INSERT: pb.INSERT, Operation.UPDATE: pb.UPDATE, Operation.DELETE: pb.DELETE,
    Operation.SNAPSHOT: pb.SNAPSHOT,
}
OPERATIONS = {wire: operation for operation, wire in WIRE_OPERATIONS.items()}


def _operation_from_wire(operation: pb.Operation) -> Operation:
    if operation not in OPERATIONS:
        raise MalformedPayload("unknown operation")
    return OPERATIONS[operation]


def uuid_from_wire(raw: bytes, what: str) -> uuid.UUID:
    if len(raw) != 16:
        raise MalformedPayload(f"{what} must be 16 bytes")
    return uuid.UUID(bytes=raw)


def as_received(event: ChangeEvent, *, include_before: bool = True) -> ChangeEvent:
    """The event as the receiver decodes it: what `event_to_wire` keeps of it."""
    names = NameTable()
    return event_from_wire(
        event_to_wire(event, names, include_before=include_before), names,
    )

"""Reading an UploadBatchV2: every structural count checked before values are built, event ids
derived from the source coordinates and checked against the digest the sender recorded.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from tidesync.domain.change_event import (
    SCHEMA_VERSION,
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    SourceCoordinates,
    event_id_for,
    tombstone_revision,
)
from tidesync.domain.values import Row, Value
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.columns import CONVERSION_ERRORS, NameTable, moment_from_micros
from tidesync.wire.events import OPERATIONS, with_key
from tidesync.wire.protocol import EventIdMismatch, MalformedPayload, ShapeTooLarge, WireReason
from tidesync.wire.v2_columns import decode_column
from tidesync.wire.v2_encode import ids_digest, words_for

_UINT64 = 1 << 64
_NONE, _EXPLICIT, _TOMBSTONE, _CHAINED = (pb.V2_REVISION_NONE, pb.V2_REVISION_EXPLICIT,
                                          pb.V2_REVISION_TOMBSTONE, pb.V2_REVISION_CHAINED)


@dataclass(frozen=True, slots=True)
class DecodedV2:
    """The events of a v2 batch in batch order, and which of them left their before values
    out (before_omitted)."""

    events: tuple[ChangeEvent, ...]
    before_omitted: frozenset[int]


def decode_events(batch: pb.UploadBatchV2, *, max_events: int, max_columns: int) -> DecodedV2:
    """The batch's events; MalformedPayload for any inconsistency, EventIdMismatch when the
    derived ids are not the ones the sender recorded, ShapeTooLarge past a cap."""
    count = batch.event_count
    if count > max_events:
        raise ShapeTooLarge(f"more than {max_events} events in one batch",
                            WireReason.TOO_MANY_EVENTS)
    names = NameTable(batch.strings)
    columns = batch.events
    table_of = _expand_runs(columns.table_runs, count, len(batch.tables), "table")
    stream_of = _expand_runs(columns.stream_runs, count, len(batch.streams), "stream")
    operations = _operations(columns.operations, count)
    offsets = _offsets(batch, stream_of, count)
    members: list[list[int]] = [[] for _ in batch.tables]
    for index, table in enumerate(table_of):
        members[table].append(index)
    _check_value_count(batch, members, count, max_columns)
    records = _records(batch, members, names, count)
    ids = _event_ids(batch, names, stream_of, offsets, records, operations)
    bases, results = _revisions(columns, records, ids, operations)
    images, omitted = _images(batch, members, names, records, operations, bases, results)
    fields = _event_fields(columns, count, offsets)
    details = _details(columns, names, count)
    events = []
    for index in range(count):
        stream = batch.streams[stream_of[index]]
        before, after = images[index]
        try:
            events.append(ChangeEvent(
                event_id=ids[index], origin_node_id=names.name(stream.origin_node_ref),
                source_connector_id=names.name(stream.source_connector_ref),
                source_topic=names.name(stream.source_topic_ref),
                source_partition=stream.source_partition, source_position=offsets[index],
                record=records[index], operation=operations[index],
                captured_at=fields["captured_at"][index], before=before, after=after,
                base_revision=bases[index], result_revision=results[index],
                source_sequence=fields["sequence"][index],
                transaction_id=fields["transaction_id"][index],
                transaction_order=fields["transaction_order"][index],
                rule_id=fields["rule_id"][index], rule_version=fields["rule_version"][index],
                business_occurred_at=fields["business_occurred_at"][index],
                trace_id=fields["trace_id"][index] or "", replay_epoch=stream.replay_epoch,
                schema_version=fields["schema_version"][index] or SCHEMA_VERSION,
                source_details=details[index],
            ))
        except CONVERSION_ERRORS as error:
            raise MalformedPayload(f"inconsistent change event at index {index}") from error
    return DecodedV2(tuple(events), frozenset(omitted))


def _expand_runs(runs: Sequence[int], count: int, limit: int, what: str) -> list[int]:
    if len(runs) % 2:
        raise MalformedPayload(f"{what} runs must come in pairs")
    out: list[int] = []
    for position in range(0, len(runs), 2):
        item, length = runs[position], runs[position + 1]
        if item >= limit or length == 0 or len(out) + length > count:
            raise MalformedPayload(f"{what} runs do not fit the batch")
        out += [item] * length
    if len(out) != count:
        raise MalformedPayload(f"{what} runs do not cover every event")
    return out


def _operations(raw: Sequence[int], count: int) -> list[Operation]:
    if len(raw) != count:
        raise MalformedPayload("one operation per event expected")
    try:
        return [OPERATIONS[operation] for operation in raw]  # type: ignore[index]
    except KeyError:
        raise MalformedPayload("unknown operation") from None


def _offsets(batch: pb.UploadBatchV2, stream_of: list[int], count: int) -> list[int]:
    deltas = batch.events.offset_deltas
    if len(deltas) != count:
        raise MalformedPayload("one offset per event expected")
    last = [stream.base_offset for stream in batch.streams]
    offsets = []
    for stream, delta in zip(stream_of, deltas, strict=True):
        offset = last[stream] + delta
        if not 0 <= offset < _UINT64:
            raise MalformedPayload("queue coordinate out of range")
        last[stream] = offset
        offsets.append(offset)
    return offsets


def _popcounts(bits: Sequence[int], rows: int, columns: int, what: str) -> list[int]:
    """Per column, how many rows' bitmaps hold it."""
    words = words_for(columns)
    if len(bits) != rows * words:
        raise MalformedPayload(f"{what} bitmaps do not fit their events")
    counts = [0] * columns
    for row in range(rows):
        mask = _mask(bits, row, words)
        if mask >> columns:
            raise MalformedPayload(f"{what} bitmap names a column that is not there")
        column = 0
        while mask:
            if mask & 1:
                counts[column] += 1
            mask >>= 1
            column += 1
    return counts


def _mask(bits: Sequence[int], row: int, words: int) -> int:
    if words == 1:
        return bits[row]
    mask = 0
    for word in range(words):
        mask |= bits[row * words + word] << (64 * word)
    return mask


def _check_value_count(batch: pb.UploadBatchV2, members: list[list[int]], count: int,
                       max_columns: int) -> None:
    """Refuse a batch whose images, keys and details hold more values than `max_columns`
    before any of them is decoded (what decoding costs is bounded by this)."""
    total = len(batch.events.detail_bits) * 64
    for table, rows in zip(batch.tables, members, strict=True):
        total += len(rows) * len(table.key_refs)
        total += (len(table.after_bits) + len(table.before_bits)) * 64
    if total > max_columns and _exact_value_count(batch, members, count) > max_columns:
        raise ShapeTooLarge(f"more than {max_columns} columns in one batch",
                            WireReason.TOO_MANY_COLUMNS)


def _exact_value_count(batch: pb.UploadBatchV2, members: list[list[int]], count: int) -> int:
    total = sum(_popcounts(batch.events.detail_bits, count, len(batch.events.detail_refs),
                           "detail"))
    for table, rows in zip(batch.tables, members, strict=True):
        total += len(rows) * len(table.key_refs)
        total += 2 * sum(_popcounts(table.after_bits, len(rows), len(table.column_refs),
                                    "column"))
    return total


def _names(refs: Sequence[int], names: NameTable, what: str) -> list[str]:
    out = [names.name(ref) for ref in refs]
    if len(set(out)) != len(out):
        raise MalformedPayload(f"a {what} name appears twice")
    return out


def _records(batch: pb.UploadBatchV2, members: list[list[int]], names: NameTable,
             count: int) -> list[RecordKey]:
    records: list[RecordKey | None] = [None] * count
    for table, rows in zip(batch.tables, members, strict=True):
        if not rows:
            raise MalformedPayload("a table without events")
        key_names = _names(table.key_refs, names, "key column")
        if not key_names or len(table.key) != len(key_names):
            raise MalformedPayload("a table's key columns do not match their values")
        database, name = names.name(table.database_ref), names.name(table.table_ref)
        schema = names.name(table.schema_ref) if table.HasField("schema_ref") else None
        values = [decode_column(column, len(rows)) for column in table.key]
        for position, index in enumerate(rows):
            try:
                records[index] = RecordKey(database, name, tuple(
                    (key, column[position]) for key, column in zip(key_names, values,
                                                                    strict=True)), schema)
            except CONVERSION_ERRORS as error:
                raise MalformedPayload("bad record key") from error
    return records  # type: ignore[return-value]


def _event_ids(batch: pb.UploadBatchV2, names: NameTable, stream_of: list[int],
               offsets: list[int], records: list[RecordKey],
               operations: list[Operation]) -> list[uuid.UUID]:
    explicit = dict(_explicit_ids(batch))
    streams = [(names.name(s.origin_node_ref), s.replay_epoch, names.name(s.source_topic_ref),
                s.source_partition) for s in batch.streams]
    ids = []
    for index, (stream, offset, record, operation) in enumerate(
            zip(stream_of, offsets, records, operations, strict=True)):
        event_id = explicit.get(index)
        if event_id is None:
            origin, epoch, topic, partition = streams[stream]
            try:
                event_id = event_id_for(SourceCoordinates(origin, epoch, topic, partition,
                                                          offset), record, operation)
            except CONVERSION_ERRORS as error:
                raise MalformedPayload("event coordinates do not give an id") from error
        ids.append(event_id)
    if ids_digest(ids) != batch.event_ids_digest:
        raise EventIdMismatch("the event ids derived from the batch's source coordinates are"
                              " not the ids its sender recorded")
    return ids


def _explicit_ids(batch: pb.UploadBatchV2) -> list[tuple[int, uuid.UUID]]:
    indexes, raw = batch.explicit_id_indexes, batch.explicit_ids
    if len(raw) != 16 * len(indexes) or any(
            b <= a for a, b in itertools.pairwise(indexes)) or (
            indexes and indexes[-1] >= batch.event_count):
        raise MalformedPayload("explicit event ids do not fit the batch")
    return [(index, uuid.UUID(bytes=raw[16 * n:16 * n + 16])) for n, index in enumerate(indexes)]


def _revisions(columns: pb.V2Events, records: list[RecordKey], ids: list[uuid.UUID],
               operations: list[Operation]
               ) -> tuple[list[Revision | None], list[Revision | None]]:
    modes = columns.revision_modes or [0] * len(records)
    if len(modes) != len(records):
        raise MalformedPayload("one revision mode per event expected")
    raw, position = columns.revisions, 0
    bases: list[Revision | None] = []
    results: list[Revision | None] = []
    last: dict[str, Revision] = {}
    for mode, record, event_id, operation in zip(modes, records, ids, operations, strict=True):
        base_mode, result_mode = divmod(mode, 4)
        base = result = None
        key = record.canonical() if mode else ""
        if base_mode == _CHAINED and key in last:
            base = last[key]
        elif base_mode == _EXPLICIT and position + 16 <= len(raw):
            base, position = Revision(raw[position:position + 16]), position + 16
        elif base_mode != _NONE:
            raise MalformedPayload("a base revision the batch does not carry")
        if result_mode == _TOMBSTONE and operation is Operation.DELETE:
            result = tombstone_revision(event_id)
        elif result_mode == _EXPLICIT and position + 16 <= len(raw):
            result, position = Revision(raw[position:position + 16]), position + 16
        elif result_mode != _NONE:
            raise MalformedPayload("a result revision the batch does not carry")
        if result is not None:
            last[key] = result
        bases.append(base)
        results.append(result)
    if position != len(raw):
        raise MalformedPayload("revisions left over")
    return bases, results


Image = list[tuple[str, Value]]


def _images(batch: pb.UploadBatchV2, members: list[list[int]], names: NameTable,
            records: list[RecordKey], operations: list[Operation],
            bases: list[Revision | None], results: list[Revision | None],
            ) -> tuple[list[tuple[Row | None, Row | None]], list[int]]:
    images: list[tuple[Row | None, Row | None]] = [(None, None)] * len(records)
    omitted: list[int] = []
    for table, rows in zip(batch.tables, members, strict=True):
        column_names = _names(table.column_refs, names, "column")
        afters, befores, modes = _table_images(table, rows, column_names, bases, results)
        for position, index in enumerate(rows):
            operation, mode = operations[index], modes[position]
            after, before = afters[position], befores[position]
            record = records[index]
            if operation in (Operation.INSERT, Operation.SNAPSHOT):
                if mode != pb.V2_BEFORE_NONE:
                    raise MalformedPayload(f"{operation} carries no before image")
                images[index] = (None, with_key(record, after))
                continue
            if operation is Operation.DELETE and after:
                raise MalformedPayload("DELETE carries no after image")
            if mode == pb.V2_BEFORE_OMITTED:
                omitted.append(index)
            images[index] = (with_key(record, before), None if operation is Operation.DELETE
                             else with_key(record, after))
    return images, omitted


def _table_images(table: pb.V2Table, rows: list[int], column_names: list[str],
                  bases: list[Revision | None], results: list[Revision | None]
                  ) -> tuple[list[Image], list[Image], list[int]]:
    width, words = len(column_names), words_for(len(column_names))
    modes = list(table.before_modes) or [pb.V2_BEFORE_NONE] * len(rows)
    if len(modes) != len(rows) or any(m > pb.V2_BEFORE_OMITTED for m in modes):
        raise MalformedPayload("one before mode per event expected")
    if len(table.after_bits) != len(rows) * words:
        raise MalformedPayload("column bitmaps do not fit their events")
    after_masks = [_mask(table.after_bits, row, words) for row in range(len(rows))]
    own = [m == pb.V2_BEFORE_OWN for m in modes]
    if len(table.before_bits) != sum(own) * words:
        raise MalformedPayload("before bitmaps do not fit their events")
    own_masks = iter(_mask(table.before_bits, row, words) for row in range(sum(own)))
    before_masks = [next(own_masks) if mode == pb.V2_BEFORE_OWN else
                    after_masks[row] if mode == pb.V2_BEFORE_AS_AFTER else 0
                    for row, mode in enumerate(modes)]
    if any(mask >> width for mask in after_masks + before_masks):
        raise MalformedPayload("a bitmap names a column that is not there")
    afters = _image_values(table.after, rows, column_names, after_masks, results)
    befores = _image_values(table.before, rows, column_names, before_masks, bases)
    return afters, befores, modes


def _image_values(columns: Sequence[pb.V2Column], rows: list[int], column_names: list[str],
                  masks: list[int], revisions: list[Revision | None]) -> list[Image]:
    images: list[Image] = [[] for _ in rows]
    if not any(masks):
        if any(column.ByteSize() for column in columns):
            raise MalformedPayload("image values without events holding them")
        return images
    if len(columns) != len(column_names):
        raise MalformedPayload("one value column per table column expected")
    for number, (name, column) in enumerate(zip(column_names, columns, strict=True)):
        holders = [position for position, mask in enumerate(masks) if mask >> number & 1]
        values = decode_column(column, len(holders),
                               [revisions[rows[position]] for position in holders])
        for position, value in zip(holders, values, strict=True):
            images[position].append((name, value))
    return images


def _event_fields(columns: pb.V2Events, count: int, offsets: list[int]) -> dict[str, list[Any]]:
    fields: dict[str, list[Any]] = {name: decode_column(getattr(columns, name), count) for name in (
        "captured_at", "schema_version", "rule_id", "rule_version", "trace_id",
        "transaction_id", "transaction_order", "business_occurred_at")}
    gaps = decode_column(columns.sequence_gap, count)
    fields["sequence"] = [None if gap is None else offset - gap  # type: ignore[operator]
                          for gap, offset in zip(gaps, offsets, strict=True)]
    if any(s is not None and not 0 <= s < _UINT64 for s in fields["sequence"]):
        raise MalformedPayload("source sequence out of range")
    for name, kinds in _FIELD_TYPES.items():
        if any(value is not None and type(value) not in kinds for value in fields[name]):
            raise MalformedPayload(f"{name} holds a value of another type")
    if any(at is None for at in fields["captured_at"]):
        raise MalformedPayload("captured_at missing")
    return fields


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "captured_at": (type(moment_from_micros(0)),), "schema_version": (str,),
    "rule_id": (str,), "rule_version": (int,), "trace_id": (str,), "transaction_id": (str,),
    "transaction_order": (int,), "business_occurred_at": (type(moment_from_micros(0)),),
    "sequence": (int,),
}


def _details(columns: pb.V2Events, names: NameTable, count: int
             ) -> list[MappingProxyType[str, Value]]:
    detail_names = _names(columns.detail_refs, names, "source detail")
    rows: list[dict[str, Value]] = [{} for _ in range(count)]
    if not detail_names:
        if columns.detail_bits or columns.details:
            raise MalformedPayload("source details without names")
        return [MappingProxyType(row) for row in rows]
    words = words_for(len(detail_names))
    if len(columns.detail_bits) != count * words or len(columns.details) != len(detail_names):
        raise MalformedPayload("source details do not fit the batch")
    masks = [_mask(columns.detail_bits, row, words) for row in range(count)]
    if any(mask >> len(detail_names) for mask in masks):
        raise MalformedPayload("a bitmap names a source detail that is not there")
    for number, (name, column) in enumerate(zip(detail_names, columns.details, strict=True)):
        holders = [row for row, mask in enumerate(masks) if mask >> number & 1]
        for row, value in zip(holders, decode_column(column, len(holders)), strict=True):
            rows[row][name] = value
    return [MappingProxyType(row) for row in rows]

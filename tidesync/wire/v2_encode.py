"""Upload batches of protocol major 2 (`UploadBatchV2`): the batch's events grouped by table and
laid out column-wise, event ids left for the receiver to derive (see sync.proto).
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tidesync.domain.change_event import (
    SCHEMA_VERSION,
    ChangeEvent,
    Operation,
    RecordKey,
    Revision,
    tombstone_revision,
)
from tidesync.domain.values import Value
from tidesync.wire import sync_pb2 as pb
from tidesync.wire.columns import NameTable, epoch_micros
from tidesync.wire.events import WIRE_OPERATIONS, key_names_checked, wire_images
from tidesync.wire.protocol import UPLOAD_V2_VERSION
from tidesync.wire.v2_columns import encode_column

_INT64_MIN = -(2**63)
TableShape = tuple[str, str | None, str, tuple[str, ...]]
"""(database, schema, table, key column names): the events of one V2Table."""


class BeforeValues(enum.Enum):
    """Which before values a v2 batch carries (UPDATE: of the changed columns; DELETE: the
    deleted row)."""

    ALL = "all"
    """Every one, as a v1 batch with before values."""
    CONFLICT = "conflict"
    """Only for events a conflict can be recorded for: those carrying a base revision."""
    NONE = "none"


def ids_digest(event_ids: Sequence[uuid.UUID]) -> bytes:
    """The first 16 bytes of the SHA-256 of the ids, 16 bytes each in batch order."""
    return hashlib.sha256(b"".join(event_id.bytes for event_id in event_ids)).digest()[:16]


def words_for(columns: int) -> int:
    """uint64 words of a bitmap over `columns` columns."""
    return (columns + 63) // 64


@dataclass
class _Table:
    """One V2Table being built: its columns and, per column, the values in event order (each
    image's values appended as the event is added, its bitmap kept as an int)."""

    shape: TableShape
    columns: dict[str, int] = field(default_factory=dict)
    keys: list[list[Value]] = field(default_factory=list)
    after_values: list[list[Value]] = field(default_factory=list)
    after_revisions: list[list[Revision | None]] = field(default_factory=list)
    before_values: list[list[Value]] = field(default_factory=list)
    before_revisions: list[list[Revision | None]] = field(default_factory=list)
    after_masks: list[int] = field(default_factory=list)
    before_masks: list[int] = field(default_factory=list)  # of V2_BEFORE_OWN events only
    modes: list[int] = field(default_factory=list)

    def column(self, name: str) -> int:
        number = self.columns.get(name)
        if number is None:
            number = self.columns[name] = len(self.columns)
            self.after_values.append([])
            self.after_revisions.append([])
            self.before_values.append([])
            self.before_revisions.append([])
        return number


def build_batch_v2(
    events: Sequence[ChangeEvent], *, node_id: str, batch_id: uuid.UUID,
    created_at: dt.datetime, before_values: BeforeValues = BeforeValues.CONFLICT,
) -> pb.UploadBatchV2:
    """The UploadBatchV2 message of `events` (without its integrity trailer). Raises
    ValueError for an event the wire cannot carry (an image that disagrees with its key)."""
    names = NameTable()
    batch = pb.UploadBatchV2(
        protocol_version=UPLOAD_V2_VERSION, node_id=node_id, batch_id=batch_id.bytes,
        created_at_micros=epoch_micros(created_at), event_count=len(events),
        event_ids_digest=ids_digest([event.event_id for event in events]),
    )
    tables: dict[TableShape, int] = {}
    built: list[_Table] = []
    table_of: list[int] = []
    for index, event in enumerate(events):
        record = event.record
        shape = (record.database, record.schema, record.table,
                 tuple([name for name, _ in record.primary_key]))
        number = tables.get(shape)
        if number is None:
            number = tables[shape] = len(built)
            built.append(_Table(shape, keys=[[] for _ in shape[3]]))
        table_of.append(number)
        _add_to_table(built[number], event, before_values)
        if event.event_id != event.expected_event_id():
            batch.explicit_id_indexes.append(index)
            batch.explicit_ids += event.event_id.bytes
    _streams(events, names, batch)
    batch.events.table_runs.extend(_runs(table_of))
    _event_columns(events, names, batch.events)
    for table in built:
        _table_to_wire(table, names, batch.tables.add())
    batch.strings.extend(names.names)
    return batch


def _add_to_table(table: _Table, event: ChangeEvent, before_values: BeforeValues) -> None:
    key_names = key_names_checked(event)
    for values, (_, value) in zip(table.keys, event.record.primary_key, strict=True):
        values.append(value)
    before, after = wire_images(event, key_names)
    mode, keep = pb.V2_BEFORE_NONE, False
    if before:
        keep = before_values is BeforeValues.ALL or (
            before_values is BeforeValues.CONFLICT and event.base_revision is not None)
        if not keep:
            mode = pb.V2_BEFORE_OMITTED
        else:
            same = len(before) == len(after) and all(
                a[0] == b[0] for a, b in zip(before, after, strict=True))
            mode = pb.V2_BEFORE_AS_AFTER if same else pb.V2_BEFORE_OWN
    # Columns are numbered in order of appearance: an event's after columns, then its before.
    table.after_masks.append(_mask(table, after, table.after_values, table.after_revisions,
                                   event.result_revision))
    if keep:
        mask = _mask(table, before, table.before_values, table.before_revisions,
                     event.base_revision)
        if mode == pb.V2_BEFORE_OWN:
            table.before_masks.append(mask)
    else:
        columns = table.columns
        for name, _ in before:
            if name not in columns:
                table.column(name)
    table.modes.append(mode)


def _runs(items: Sequence[int]) -> list[int]:
    """(item, run length) pairs."""
    out: list[int] = []
    for item in items:
        if out and out[-2] == item:
            out[-1] += 1
        else:
            out += [item, 1]
    return out


def _streams(events: Sequence[ChangeEvent], names: NameTable, batch: pb.UploadBatchV2) -> None:
    streams: dict[tuple[str, str, str, int, int], int] = {}
    last: list[int] = []
    order: list[int] = []
    deltas: list[int] = []
    for event in events:
        key = (event.origin_node_id, event.source_connector_id, event.source_topic,
               event.source_partition, event.replay_epoch)
        number = streams.get(key)
        if number is not None and not _INT64_MIN <= event.source_position - last[number] < 2**63:
            number = None  # a jump no delta holds: the stream starts again
        if number is None:
            number = streams[key] = len(last)
            last.append(event.source_position)
            batch.streams.add(
                origin_node_ref=names.ref(key[0]), source_connector_ref=names.ref(key[1]),
                source_topic_ref=names.ref(key[2]), source_partition=key[3],
                replay_epoch=key[4], base_offset=event.source_position)
        order.append(number)
        deltas.append(event.source_position - last[number])
        last[number] = event.source_position
    batch.events.stream_runs.extend(_runs(order))
    batch.events.offset_deltas.extend(deltas)


def _event_columns(events: Sequence[ChangeEvent], names: NameTable, out: pb.V2Events) -> None:
    out.operations.extend(WIRE_OPERATIONS[event.operation] for event in events)
    encode_column([event.captured_at for event in events], out.captured_at)
    encode_column([None if e.source_sequence is None else e.source_position - e.source_sequence
                   for e in events], out.sequence_gap)
    encode_column([None if e.schema_version == SCHEMA_VERSION else e.schema_version
                   for e in events], out.schema_version)
    encode_column([e.rule_id for e in events], out.rule_id)
    encode_column([e.rule_version for e in events], out.rule_version)
    encode_column([e.trace_id or None for e in events], out.trace_id)
    encode_column([e.transaction_id for e in events], out.transaction_id)
    encode_column([e.transaction_order for e in events], out.transaction_order)
    encode_column([e.business_occurred_at for e in events], out.business_occurred_at)
    _revisions(events, out)
    _details(events, names, out)


def _revisions(events: Sequence[ChangeEvent], out: pb.V2Events) -> None:
    modes: list[int] = []
    explicit = bytearray()
    last_result: dict[tuple[object, ...], Revision] = {}
    for event in events:
        base, result = event.base_revision, event.result_revision
        if base is None and result is None:
            modes.append(0)
            continue
        record = _record_identity(event.record)
        base_mode = pb.V2_REVISION_NONE
        if base is not None:
            base_mode = (pb.V2_REVISION_CHAINED if last_result.get(record) == base
                         else pb.V2_REVISION_EXPLICIT)
            if base_mode == pb.V2_REVISION_EXPLICIT:
                explicit += base.value
        result_mode = pb.V2_REVISION_NONE
        if result is not None:
            last_result[record] = result
            if event.operation is Operation.DELETE and result == tombstone_revision(
                    event.event_id):
                result_mode = pb.V2_REVISION_TOMBSTONE
            else:
                result_mode = pb.V2_REVISION_EXPLICIT
                explicit += result.value
        modes.append(base_mode * 4 + result_mode)
    if any(modes):
        out.revision_modes.extend(modes)
        out.revisions = bytes(explicit)


_PLAIN_KEY_TYPES = frozenset({int, str})


def _record_identity(record: RecordKey) -> tuple[object, ...]:
    """A value equal for two records exactly when their canonical keys are: a key of plain
    ints and texts (exact types, equal exactly when their canonical texts are) as it is,
    any other by its canonical text."""
    key = record.primary_key
    if all(type(value) in _PLAIN_KEY_TYPES for _, value in key):
        return (record.database, record.schema, record.table, True, key)
    return (record.database, record.schema, record.table, False, record.key_text())


def _details(events: Sequence[ChangeEvent], names: NameTable, out: pb.V2Events) -> None:
    columns: dict[str, int] = {}
    # Events of one source share the names of their details, in one order: each order met
    # is resolved to its columns and bitmap once.
    layouts: dict[tuple[str, ...], tuple[int, list[int]]] = {}
    laid_out: list[tuple[tuple[int, list[int]], Iterable[Value]]] = []
    for event in events:
        details = event.source_details
        order = tuple(details)
        layout = layouts.get(order)
        if layout is None:
            numbers = [columns.setdefault(name, len(columns)) for name in order]
            layout = layouts[order] = (sum(1 << number for number in numbers), numbers)
        laid_out.append((layout, details.values()))
    if not columns:
        return
    words = words_for(len(columns))
    if len(layouts) == 1:  # one order, numbered 0, 1, …: the columns are its transpose
        (mask, _), = layouts.values()
        rows = [event_values for _, event_values in laid_out]
        values: list[list[Value]] = [list(column) for column in zip(*rows, strict=True)]
        bits = _words(mask, words) * len(laid_out)
    else:
        values = [[] for _ in columns]
        bits = []
        for (mask, numbers), event_values in laid_out:
            for number, value in zip(numbers, event_values, strict=True):
                values[number].append(value)
            bits += _words(mask, words)
    out.detail_refs.extend(names.ref(name) for name in columns)
    out.detail_bits.extend(bits)
    for column_values in values:
        encode_column(column_values, out.details.add())


def _words(mask: int, words: int) -> list[int]:
    if words == 1:
        return [mask]
    return [(mask >> (64 * word)) & 0xFFFF_FFFF_FFFF_FFFF for word in range(words)]


def _table_to_wire(table: _Table, names: NameTable, out: pb.V2Table) -> None:
    database, schema, name, key_names = table.shape
    out.database_ref = names.ref(database)
    if schema is not None:
        out.schema_ref = names.ref(schema)
    out.table_ref = names.ref(name)
    out.key_refs.extend(names.ref(key) for key in key_names)
    for values in table.keys:
        encode_column(values, out.key.add())
    out.column_refs.extend(names.ref(column) for column in table.columns)
    words = words_for(len(table.columns))
    out.after_bits.extend(_all_words(table.after_masks, words))
    out.before_bits.extend(_all_words(table.before_masks, words))
    if any(table.modes):
        out.before_modes.extend(table.modes)
    for values, revisions in zip(table.after_values, table.after_revisions, strict=True):
        encode_column(values, out.after.add(), revisions)
    if any(table.before_values):
        for values, revisions in zip(table.before_values, table.before_revisions, strict=True):
            encode_column(values, out.before.add(), revisions)


def _all_words(masks: list[int], words: int) -> list[int]:
    if words == 1:
        return masks
    return [word for mask in masks for word in _words(mask, words)]


def _mask(table: _Table, image: list[tuple[str, Value]], values: list[list[Value]],
          revisions: list[list[Revision | None]], revision: Revision | None) -> int:
    """The image's bitmap (columns not met before numbered now); its values appended to
    their columns (one per column)."""
    columns = table.columns
    mask = 0
    for name, value in image:
        column = columns.get(name)
        if column is None:
            column = table.column(name)
        mask |= 1 << column
        values[column].append(value)
        revisions[column].append(revision)
    return mask
